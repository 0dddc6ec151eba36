#!/usr/bin/env bash
# hvdrun's srun listener under a connection flood, in the test Slurm cluster (issue 51, finding 9):
# what hvdrun costs in CPU when strangers hold more connections to its listener than it has
# descriptors (a limit of 1030, soft and hard, where accept() fails with EMFILE), against the same
# flood at the normal limit. Before the fix the listener spun on EMFILE (3.79 CPU-s in 4 s).
#
# How the flood lands while the listener waits: a stand-in `srun` first on PATH (made here) sees
# hvdrun's agent step (HVD_AGENT_CONNECT names the listener), writes the port for the flooder and
# waits HOLD seconds before it runs the real srun, so the agents connect through the flood. The
# flooder (python, started by this script outside hvdrun's limits) holds FLOOD silent connections
# to that port, opening a new one for each the listener closes, until the job ends.
#
# Measures `hvdrun true` (3 agents, 3 ranks) in one allocation: GNU time's user + sys of hvdrun
# and what it waited for (the stand-in and srun: the same in both cases), limit 1030 and normal
# alternating, ROUNDS each, medians. Goal: at 1030, at most the CPU at the normal limit; the job
# succeeds in both. Starts the tests/slurm cluster unless CLUSTER_DIR is given.
# Usage: bench/srun_flood_bench.sh [CLUSTER_DIR [ROUNDS]]   HVDRUN=path FLOOD=1500 HOLD=3
set -euo pipefail
cd "$(dirname "$0")/.."
hvdrun=$(realpath "${HVDRUN:-build/cli/hvdrun}")
rounds=${2:-5}
flood=${FLOOD:-1500}
hold=${HOLD:-3}
# shellcheck source=bench/slurm_fixture.sh
. bench/slurm_fixture.sh "${1:-}"

work=$(mktemp -d)
trap '[ -n "$own" ] && bash tests/slurm/slurm_cluster.sh stop "$own" >/dev/null; rm -rf "$work"' EXIT
mkdir "$work/bin"
real_srun=$(command -v srun)
cat >"$work/bin/srun" <<EOF
#!/usr/bin/env bash
if [[ -n \${HVD_AGENT_CONNECT:-} ]]; then
  read -r _ port <<<"\$HVD_AGENT_CONNECT"
  echo "\$port" >"$work/port.tmp" && mv "$work/port.tmp" "$work/port"
  sleep $hold
fi
exec "$real_srun" "\$@"
EOF
chmod +x "$work/bin/srun"

# The flooder: waits for the port, holds `flood` connections open until the stop file appears.
cat >"$work/flood.py" <<'EOF'
import os, resource, select, socket, sys, time
port_file, stop_file, want = sys.argv[1], sys.argv[2], int(sys.argv[3])
hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
while not os.path.exists(port_file):
    if os.path.exists(stop_file):
        sys.exit(0)
    time.sleep(0.005)
port = int(open(port_file).read())
held, opened = [], 0
while not os.path.exists(stop_file):
    while len(held) < want:
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", port))
        held.append(s)
        opened += 1
    # Drop the ones the listener closed (readable at EOF, or reset), to open new ones.
    poller = select.poll()
    by_fd = {s.fileno(): s for s in held}
    for fd in by_fd:
        poller.register(fd, select.POLLIN)
    for fd, _ in poller.poll(20):
        s = by_fd[fd]
        try:
            if s.recv(1, socket.MSG_DONTWAIT) != b"":
                continue
        except (BlockingIOError, InterruptedError):
            continue
        except OSError:
            pass
        held.remove(s)
        s.close()
print(opened)
EOF

# One measured run: "cpu_seconds exit_code connections_opened".
run_one() {  # LIMIT ("normal" or a number)
  rm -f "$work/port" "$work/stop"
  python3 "$work/flood.py" "$work/port" "$work/stop" "$flood" >"$work/opened" &
  local flooder=$! limit=$1 code=0
  PATH="$work/bin:$PATH" bash -c '
    [ "$1" = normal ] || ulimit -n "$1" || exit 99  # soft and hard
    exec /usr/bin/time -f "%U %S" -o "$2" "$3" true' _ "$limit" "$work/time" "$hvdrun" \
    >/dev/null 2>"$work/err" || code=$?
  touch "$work/stop"
  wait "$flooder" || true
  echo "$(awk '{print $1 + $2}' "$work/time") $code $(cat "$work/opened")"
}

export -f run_one
export work flood hvdrun
n=() l=()
inner=$(mktemp)
cat >"$inner" <<'EOF'
for ((i = 1; i <= ROUNDS; i++)); do
  if ((i % 2)); then a=$(run_one normal); b=$(run_one 1030); else b=$(run_one 1030); a=$(run_one normal); fi
  echo "$a $b"
done
EOF
results=$(ROUNDS=$rounds salloc -N3 -n3 bash "$inner" 2>"$work/salloc.err") ||
  { cat "$work/salloc.err" >&2; echo "FAILED: the allocation" >&2; exit 1; }
rm -f "$inner"
echo "$results" | awk '{printf "round %d: normal limit %.2f CPU-s (exit %d, %d connections), hard limit 1030 %.2f CPU-s (exit %d, %d connections)\n", NR, $1, $2, $3, $4, $5, $6}'
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
nm=$(awk '{print $1}' <<<"$results" | median)
lm=$(awk '{print $4}' <<<"$results" | median)
echo "median CPU: normal limit ${nm}s, hard limit 1030 ${lm}s; ratio $(echo "scale=2; $lm / $nm" | bc)x (goal: at most 1.0x, within noise)"
awk '$2 != 0 || $5 != 0 {bad = 1} END {exit bad}' <<<"$results" || { echo "FAILED: a job did not exit 0" >&2; exit 1; }
