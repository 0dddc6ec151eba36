#!/usr/bin/env python3
"""A misbehaving hvdrun agent for the launcher's protocol tests (tests/e2e/test_launch_protocol.cpp).

Started over SSH as `fake_agent.py MODE VERSION --agent` (through a wrapper the test writes as
--agent-path). It speaks agent/protocol.h's frames: a correct hello, then what MODE says:
  listening-twice  answers the probe-listen request with two Listening frames
  bad-json         answers it with a Listening frame whose port is a string
  early-started    sends a Started frame right after its hello (no job was sent)
  error-bad-types  sends an Error frame whose message is a number
  early-report     sends a rank's stall report (RankReport) right after its hello
Then it waits for its stdin to close, as a real agent would.
"""
import json
import os
import socket
import struct
import sys

HELLO, STARTED, ERROR, LISTENING, RANK_REPORT = 1, 2, 5, 7, 13
PROBE_LISTEN = 19


def send(kind, payload=b""):
    sys.stdout.buffer.write(struct.pack(">IB", len(payload), kind) + payload)
    sys.stdout.buffer.flush()


def read_exact(n):
    data = b""
    while len(data) < n:
        chunk = sys.stdin.buffer.read(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def next_frame():
    header = read_exact(5)
    if header is None:
        return None
    length, kind = struct.unpack(">IB", header)
    return kind, read_exact(length)


def main():
    mode, version = sys.argv[1], sys.argv[2]
    send(HELLO, json.dumps({  # "protocol": agent/protocol.h's kProtocolVersion
        "protocol": 8, "version": version, "hostname": socket.gethostname(),
        "boot_id": "fake-agent-" + str(os.getpid()), "pid": os.getpid(),
        "ssh_connection": os.environ.get("SSH_CONNECTION", ""), "interfaces": []}).encode())
    if mode == "early-started":
        send(STARTED, struct.pack(">II", 0, os.getpid()))
    if mode == "early-report":
        send(RANK_REPORT, struct.pack(">I", 0) + b'{"kind":"stall","tensors":[]}')
    if mode == "error-bad-types":
        send(ERROR, json.dumps({"message": 42, "hint": ["x"]}).encode())
    while True:
        frame = next_frame()
        if frame is None:
            return
        if frame[0] == PROBE_LISTEN:
            if mode == "listening-twice":
                send(LISTENING, json.dumps({"port": 40001}).encode())
                send(LISTENING, json.dumps({"port": 40002}).encode())
            elif mode == "bad-json":
                send(LISTENING, json.dumps({"port": "forty"}).encode())
            else:
                send(LISTENING, json.dumps({"port": 40001}).encode())


if __name__ == "__main__":
    main()
