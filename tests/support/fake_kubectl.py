#!/usr/bin/env python3
"""A stand-in for `kubectl exec -i POD -- CMD ARGS...` in the --rsh-agent tests: it runs CMD on
this machine as kubectl would run it in the pod, and relays its stdin, stdout and stderr through
its own, as kubectl's client does, so that killing this process cuts the "pod"'s process off
(its stdin ends, its output has nowhere to go) as killing kubectl would.

Test knobs (environment):
  HVDTEST_FAKE_KUBECTL_LOG=FILE   append one line per call: POD, then CMD ARGS
  HVDTEST_FAKE_KUBECTL_FAIL=POD   for that pod, say what kubectl says of a missing pod, exit 1
  HVDTEST_FAKE_KUBECTL_HANG=POD   for that pod, start nothing and never end
Without -i/--stdin the command gets no stdin, as with kubectl.
"""
import os
import subprocess
import sys
import threading
import time


def relay(src, dst, close_dst):
    try:
        while True:
            data = os.read(src, 65536)
            if not data:
                break
            os.write(dst, data)
    except OSError:
        pass
    if close_dst:
        try:
            os.close(dst)
        except OSError:
            pass


def main(argv):
    if not argv or argv[0] != "exec":
        print("fake kubectl: only `exec` is faked", file=sys.stderr)
        return 2
    args = argv[1:]
    if "--" not in args:
        print("fake kubectl: exec needs `-- COMMAND`", file=sys.stderr)
        return 2
    split = args.index("--")
    options, command = args[:split], args[split + 1:]
    stdin = "-i" in options or "--stdin" in options
    pods = [o for o in options if not o.startswith("-")]
    if len(pods) != 1 or not command:
        print("fake kubectl: exec needs one POD and a COMMAND", file=sys.stderr)
        return 2
    pod = pods[0]
    log = os.environ.get("HVDTEST_FAKE_KUBECTL_LOG")
    if log:
        with open(log, "a") as f:
            f.write(" ".join([pod] + command) + "\n")
    if os.environ.get("HVDTEST_FAKE_KUBECTL_FAIL") == pod:
        print(f'Error from server (NotFound): pods "{pod}" not found', file=sys.stderr)
        return 1
    if os.environ.get("HVDTEST_FAKE_KUBECTL_HANG") == pod:
        while True:
            time.sleep(60)
    child = subprocess.Popen(command, stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    threads = [threading.Thread(target=relay, args=(child.stdout.fileno(), 1, False)),
               threading.Thread(target=relay, args=(child.stderr.fileno(), 2, False))]
    if stdin:
        threads.append(threading.Thread(target=relay, args=(0, child.stdin.fileno(), True),
                                        daemon=True))
    for t in threads:
        t.start()
    code = child.wait()
    for t in threads[:2]:
        t.join()
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
