#!/usr/bin/env bash
# hvdrun inside a real Slurm allocation (the slurm_cluster fixture): with no -H it takes its hosts
# from SLURM_JOB_NODELIST/SLURM_TASKS_PER_NODE and -np from SLURM_NTASKS, and refuses an -np
# larger than the allocation.
#
#   allocation_hosts.sh HVDRUN CLUSTER_DIR     (CLUSTER_DIR: where slurm_cluster.sh started it)
#
# Exits non-zero, saying what was expected and what came, when a check fails.
set -euo pipefail

readonly SALLOC_WAIT_S=30   # salloc --immediate: fail rather than queue behind someone else's job
readonly RUN_TIMEOUT_S=60

fail() { printf 'allocation_hosts.sh: FAIL: %s\n' "$*" >&2; exit 1; }

(($# == 2)) || { echo "usage: allocation_hosts.sh HVDRUN CLUSTER_DIR" >&2; exit 2; }
hvdrun=$1 cluster=$2
[[ -x $hvdrun ]] || fail "hvdrun binary '$hvdrun' is not executable"
[[ -f $cluster/slurm.env ]] ||
    fail "no running cluster in '$cluster' ($cluster/slurm.env missing; did slurm_cluster_start run?)"

# Only our cluster's settings: a ctest that itself runs inside a Slurm job must not leak that job's
# SLURM_* variables (hvdrun would read them) or SALLOC_* defaults into these allocations.
# shellcheck source=tests/slurm/cluster_env.sh
. "$(dirname "$(realpath "$0")")/cluster_env.sh"
use_test_cluster "$cluster"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Runs `salloc -N3 -n6 hvdrun ARGS...`; stdout, stderr and the exit status land in $work.
run_in_allocation() {
    local rc=0
    timeout "$RUN_TIMEOUT_S" salloc --immediate="$SALLOC_WAIT_S" -N3 -n6 "$hvdrun" "$@" \
        >"$work/out" 2>"$work/err" </dev/null || rc=$?
    echo "$rc" >"$work/rc"
}

show() {
    printf -- '--- exit status: %s\n--- stdout:\n%s\n--- stderr:\n%s\n' \
        "$(<"$work/rc")" "$(<"$work/out")" "$(<"$work/err")" >&2
}

# 1. The plan: hosts and -np from the allocation.
run_in_allocation --dry-run --json true
if [[ $(<"$work/rc") != 0 ]]; then
    show
    fail "salloc -N3 -n6 hvdrun --dry-run --json true: expected exit 0, got $(<"$work/rc")"
fi
if ! python3 - "$work/out" <<'EOF'; then
import json, sys

with open(sys.argv[1], encoding="utf-8") as f:
    text = f.read()
try:
    doc = json.loads(text)
except ValueError as e:
    sys.exit(f"stdout is not one JSON document ({e}):\n{text}")

problems = []
def expect(what, want, got):
    if want != got:
        problems.append(f"{what}: expected {want!r}, got {got!r}")

expect("hosts_source.kind", "slurm", (doc.get("hosts_source") or {}).get("kind"))
expect("np", 6, doc.get("np"))
hosts = doc.get("hosts")
if not isinstance(hosts, list):
    problems.append(f"hosts: expected a list, got {hosts!r}")
else:
    expect("hosts (host, slots)", [("n1", 2), ("n2", 2), ("n3", 2)],
           [(h.get("host"), h.get("slots")) for h in hosts])
if problems:
    sys.exit("the --dry-run --json plan is wrong:\n  " + "\n  ".join(problems)
             + "\nhosts_source: " + json.dumps(doc.get("hosts_source"))
             + "\nhosts: " + json.dumps(hosts))
EOF
    show
    fail "salloc -N3 -n6 hvdrun --dry-run --json true: the plan does not match the allocation"
fi
echo "ok: hosts_source slurm, np 6, hosts n1 n2 n3 with 2 slots each"

# 2. More ranks than the allocation has tasks: a usage error (64) that names the allocation.
readonly want_msg='more than the 6 slots of the Slurm allocation'
run_in_allocation --dry-run -np 7 true
if [[ $(<"$work/rc") != 64 ]]; then
    show
    fail "salloc -N3 -n6 hvdrun --dry-run -np 7 true: expected exit 64, got $(<"$work/rc")"
fi
if ! grep -qF -- "$want_msg" "$work/err"; then
    show
    fail "salloc -N3 -n6 hvdrun --dry-run -np 7 true: expected '$want_msg' in stderr"
fi
echo "ok: -np 7 in a 6-task allocation exits 64 with '$want_msg'"
