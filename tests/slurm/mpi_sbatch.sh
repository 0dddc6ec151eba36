#!/usr/bin/env bash
# hvdrun inside a real Slurm allocation (the slurm_cluster fixture), the two ways not covered by
# srun_launch.sh: `hvdrun --mpi`, whose network check's agents and mpirun's daemons both start
# through Slurm (no SSH: the node names n1-n3 do not even resolve), and hvdrun in an sbatch
# script, read back from the job's output file.
#
#   mpi_sbatch.sh HVDRUN LIBHVD_CHECK CLUSTER_DIR
#
# Exits non-zero, saying what was expected and what came, when a check fails.
set -euo pipefail

readonly SALLOC_WAIT_S=30
readonly RUN_TIMEOUT_S=120

fail() { printf 'mpi_sbatch.sh: FAIL: %s\n' "$*" >&2; exit 1; }

(($# == 3)) || { echo "usage: mpi_sbatch.sh HVDRUN LIBHVD_CHECK CLUSTER_DIR" >&2; exit 2; }
hvdrun=$1 libhvd_check=$2 cluster=$3
[[ -x $hvdrun ]] || fail "hvdrun binary '$hvdrun' is not executable"
[[ -f $cluster/slurm.env ]] || fail "no running cluster in '$cluster' (did slurm_cluster_start run?)"

# Only our cluster's settings (see allocation_hosts.sh).
# shellcheck source=tests/slurm/cluster_env.sh
. "$(dirname "$(realpath "$0")")/cluster_env.sh"
use_test_cluster "$cluster"

work=$(mktemp -d)
marker="hvdmpi-$$-$RANDOM"
cleanup() {
    SLURM_CONF=$cluster/slurm.conf scancel --name="$marker" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

run() {  # run TASKS HVDRUN_ARGS...: salloc -N3 -nTASKS hvdrun ARGS; results in $work
    local tasks=$1 rc=0
    shift
    timeout "$RUN_TIMEOUT_S" salloc --immediate="$SALLOC_WAIT_S" --job-name="$marker" -N3 \
        -n"$tasks" "$hvdrun" "$@" >"$work/out" 2>"$work/err" </dev/null || rc=$?
    echo "$rc" >"$work/rc"
}
show() {
    printf -- '--- exit status: %s\n--- stdout:\n%s\n--- stderr:\n%s\n' \
        "$(<"$work/rc")" "$(<"$work/out")" "$(<"$work/err")" >&2
}
expect_rc() {  # expect_rc CODE WHAT
    [[ $(<"$work/rc") == "$1" ]] || { show; fail "$2: expected exit $1, got $(<"$work/rc")"; }
}
expect_in() {  # expect_in FILE TEXT WHAT
    grep -qF -- "$2" "$work/$1" || { show; fail "$3: expected '$2' in $1"; }
}
expect_not_in() {  # expect_not_in FILE TEXT WHAT
    ! grep -qF -- "$2" "$work/$1" || { show; fail "$3: did not expect '$2' in $1"; }
}

# 1. The --mpi dry run: the network check's agents through srun, mpirun with Slurm's launcher and
#    no SSH options.
run 6 --mpi --dry-run true
expect_rc 0 "hvdrun --mpi --dry-run"
expect_in out "srun --nodes=3 --ntasks=3 --ntasks-per-node=1 --nodelist=n1,n2,n3" \
    "the network check's agents through srun"
expect_in out "-mca plm slurm" "mpirun's daemons through Slurm"
expect_not_in out "plm_rsh_args" "no SSH options for mpirun"
echo "ok: the --mpi dry run shows the srun check step and '-mca plm slurm'"

# 2. --mpi in the allocation: 6 ranks, 2 per node, on MPI; the three nodes are one machine here,
#    so shared memory is off (btl self,tcp). No SSH can be involved: n1-n3 do not resolve.
run 6 --mpi "$libhvd_check" info
expect_rc 0 "hvdrun --mpi libhvd_check info"
for rank in 0 1 2 3 4 5; do
    expect_in out "[1,$rank]<stdout>:rank $rank of 6: local $((rank % 2)) of 2, cross $((rank / 2)) of 3, backend mpi" \
        "rank $rank's topology and backend under mpirun"
done
expect_in err "adding -mca btl self,tcp" "the notice that the nodes are one machine"
echo "ok: --mpi runs 6 ranks on n1-n3 through Slurm, MPI backend, topology right"

# (3 ranks: 6 busy-polling MPI ranks on this 2-core machine take 20 s.)
run 3 --mpi "$libhvd_check" collectives
expect_rc 0 "hvdrun --mpi libhvd_check collectives"
for rank in 0 1 2; do
    expect_in out "[1,$rank]<stdout>:rank $rank: all checks passed" "rank $rank's MPI collectives"
done
echo "ok: libhvd's collectives on MPI at 3 ranks on 3 nodes"

# 3. A failing rank under --mpi: mpirun's exit code is the rank's.
run 6 --mpi --grace 1 sh -c 'if [ "$OMPI_COMM_WORLD_RANK" = 3 ]; then exit 9; fi; exec sleep 20'
expect_rc 9 "a failing rank under --mpi in the allocation"
echo "ok: a rank's exit 9 under --mpi is hvdrun's"

# 4. sbatch: hvdrun in a batch script, its ranks' lines in the job's output file.
cat >"$work/job.sh" <<EOF
#!/bin/bash
exec "$hvdrun" sh -c 'echo "rank \$HOROVOD_RANK/\$HOROVOD_SIZE local \$HOROVOD_LOCAL_RANK cross \$HOROVOD_CROSS_RANK adv \$HVD_ADVERTISE_ADDR"'
EOF
rc=0
timeout "$RUN_TIMEOUT_S" sbatch --wait --job-name="$marker" -N3 \
    -n6 -o "$work/job.out" "$work/job.sh" >"$work/out" 2>"$work/err" </dev/null || rc=$?
echo "$rc" >"$work/rc"
[[ -f $work/job.out ]] || { show; fail "sbatch: no job output file $work/job.out"; }
[[ $rc == 0 ]] || { cat "$work/job.out" >&2; show; fail "sbatch --wait: expected exit 0, got $rc"; }
for rank in 0 1 2 3 4 5; do
    node=$((rank / 2 + 1))
    expect_in job.out "rank $rank/6 local $((rank % 2)) cross $((rank / 2)) adv 127.0.1.$node" \
        "rank $rank's line in the sbatch job's output file"
done
echo "ok: hvdrun in an sbatch script: 6 ranks on n1-n3, read from the job's output file"
