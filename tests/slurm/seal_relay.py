#!/usr/bin/env python3
"""A recording and tampering relay between hvdrun's srun agents and hvdrun (tests only).

    seal_relay.py UPSTREAM_PORT CAPTURE MODE

Listens on 127.0.0.1 (an ephemeral port, printed on stdout as one line), forwards every
connection to 127.0.0.1:UPSTREAM_PORT (hvdrun's listener for its srun agents), and appends every
byte it passes, both ways, to CAPTURE. MODE is "record" (pass everything as it is) or
"DIRECTION:ACTION:K" with DIRECTION to_agent or to_launcher and ACTION flip (one bit of the
ciphertext of sealed record K), replay (record K sent twice) or reorder (record K held back and
sent after record K+1). Records are counted from 1 after the exchange (agent/sealed_link.h):
the agent's hello and proof one way, the launcher's reply the other. Each connection is tampered
with on its own. Actions on the exchange itself: flipx (one bit of its byte K, counted from 0),
version (to_launcher: the hello's version digit made K), older (to_launcher: the hello replaced
by an older agent's clear first line) and replayx (to_launcher: once a connection's exchange has
passed, its bytes are sent again on a new connection of the relay's own, as an eavesdropper
would try; logged "replayed exchange: launcher closed" when the launcher drops it). It exits on
SIGTERM, or after IDLE_S seconds without a connection open.
"""
import os
import selectors
import signal
import socket
import sys
import threading
import time

IDLE_S = 120
REPLY = 64  # the launcher's public key and proof
PROOF = 32


class Direction:
    """One way of one connection: counts the exchange's bytes, then whole records."""

    def __init__(self, name, action):
        self.name = name
        self.action = action  # (action, k) for this direction, or None
        self.prefix = None  # bytes of the exchange still to pass before records start
        self.buf = b""
        self.count = 0
        self.held = None
        self.exchange = b""
        self.on_exchange = lambda exchange: None  # replayx: given the exchange once it passed

    def exchange_size(self, data):
        if self.name == "to_agent":
            return REPLY
        if len(data) < 9:
            return None
        return 9 + data[8] + 32 + PROOF

    def feed(self, data):
        """Bytes in; the bytes to pass on now."""
        if self.action[0] == "none":  # counted only: passed on at once, whatever they are
            if len(self.buf) < 1 << 22:
                self.parse(data)
            return data
        return self.parse(data)

    def parse(self, data):
        self.buf += data
        out = b""
        if self.prefix is None:
            size = self.exchange_size(self.buf)
            if size is None:
                return out
            self.prefix = size
            self.exchange = b""
        if self.prefix:
            take = min(self.prefix, len(self.buf))
            out += self.tamper_exchange(len(self.exchange), self.buf[:take])
            self.exchange += self.buf[:take]
            self.buf = self.buf[take:]
            self.prefix -= take
            if self.prefix:
                return out
            if self.action[0] == "replayx":
                threading.Thread(target=self.on_exchange, args=(self.exchange,)).start()
        while len(self.buf) >= 4:
            body = int.from_bytes(self.buf[:4], "big")
            if len(self.buf) < 4 + body:
                break
            record, self.buf = self.buf[: 4 + body], self.buf[4 + body :]
            self.count += 1
            out += self.tamper(record)
        return out

    def tamper_exchange(self, at, chunk):
        """The exchange's bytes from offset `at`: changed as the action says."""
        action, k = self.action
        if action == "flipx" and at <= k < at + len(chunk):
            sys.stderr.write(f"seal_relay: {self.name}: flipped a bit of exchange byte {k}\n")
            i = k - at
            return chunk[:i] + bytes([chunk[i] ^ 0x01]) + chunk[i + 1 :]
        if action == "version" and at <= 7 < at + len(chunk):
            sys.stderr.write(f"seal_relay: {self.name}: hello version made {k}\n")
            i = 7 - at
            return chunk[:i] + str(k).encode() + chunk[i + 1 :]
        if action == "older" and at == 0:
            sys.stderr.write(f"seal_relay: {self.name}: hello replaced by an older agent's\n")
            return b"HVDAGENT1 0123456789abcdef n1\n"
        if action == "older":
            return b""
        return chunk

    def tamper(self, record):
        action, k = self.action
        if self.held is not None:  # reorder: record K+1 first, then K
            held, self.held = self.held, None
            sys.stderr.write(f"seal_relay: {self.name}: sent record {self.count} before {k}\n")
            return record + held
        if self.count != k:
            return record
        if action == "flip":
            sys.stderr.write(f"seal_relay: {self.name}: flipped a bit of record {k}\n")
            return record[:6] + bytes([record[6] ^ 0x01]) + record[7:]
        if action == "replay":
            sys.stderr.write(f"seal_relay: {self.name}: sent record {k} twice\n")
            return record + record
        if action == "reorder":
            self.held = record
            return b""
        return record


def pump(src, dst, direction, capture, lock):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            with lock:
                capture.write(data)
                capture.flush()
            out = direction.feed(data)
            if out:
                dst.sendall(out)
    except OSError:
        pass
    sys.stderr.write(f"seal_relay: {direction.name}: {direction.count} records\n")
    try:
        dst.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def replay_exchange(upstream_port, exchange):
    """An agent's recorded hello and proof, sent again on a connection of our own."""
    hello, proof = exchange[:-PROOF], exchange[-PROOF:]
    said = "launcher kept it open"
    try:
        with socket.create_connection(("127.0.0.1", upstream_port), timeout=5) as s:
            s.sendall(hello)
            reply = b""
            while len(reply) < REPLY:
                part = s.recv(REPLY - len(reply))
                if not part:
                    break
                reply += part
            s.sendall(proof)
            if s.recv(4096) == b"":
                said = "launcher closed"
            else:
                said = "launcher sent records"
    except socket.timeout:
        pass
    except ConnectionRefusedError:
        said = "listener gone"  # every agent had connected: nothing was tried
    except OSError:
        said = "launcher closed"
    sys.stderr.write(f"seal_relay: replayed exchange: {said}\n")


def main():
    upstream_port, capture_path, mode = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    tamper = None
    if mode != "record":
        where, action, k = mode.split(":")
        tamper = (where, action, int(k))
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    print(listener.getsockname()[1], flush=True)
    os.close(1)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    capture = open(capture_path, "ab")
    lock = threading.Lock()
    open_conns = [0]
    last = [time.monotonic()]
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ)

    def serve(agent):
        launcher = socket.create_connection(("127.0.0.1", upstream_port))
        for s in (agent, launcher):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def way(name):  # records are counted (and logged) also where nothing is changed
            return (tamper[1], tamper[2]) if tamper and tamper[0] == name else ("none", 0)

        up = Direction("to_launcher", way("to_launcher"))
        up.on_exchange = lambda exchange: replay_exchange(upstream_port, exchange)
        t1 = threading.Thread(target=pump, args=(agent, launcher, up, capture, lock))
        t2 = threading.Thread(
            target=pump, args=(launcher, agent, Direction("to_agent", way("to_agent")),
                               capture, lock))
        t1.start()
        t2.start()
        t1.join()
        t2.join()
        agent.close()
        launcher.close()
        with lock:
            open_conns[0] -= 1
            last[0] = time.monotonic()

    while True:
        if sel.select(timeout=1.0):
            conn, _ = listener.accept()
            with lock:
                open_conns[0] += 1
            threading.Thread(target=serve, args=(conn,), daemon=True).start()
        with lock:
            if open_conns[0] == 0 and time.monotonic() - last[0] > IDLE_S:
                return


if __name__ == "__main__":
    main()
