# Sourced by the Slurm benches (srun_bench.sh, srun_output_bench.sh): the test Slurm cluster
# (tests/slurm/README.md) whose folder is $1 when given, else one started now in a new folder and
# stopped when the bench exits. Sets `dir` and exports SLURM_CONF.
# shellcheck shell=bash
own=""
if [ -n "${1:-}" ]; then
  dir=$1
else
  dir=$(mktemp -d)/slurm
  HVDTEST_SLURM_OWNER_PID=$$ bash tests/slurm/slurm_cluster.sh start "$dir" >/dev/null
  own=$dir
fi
trap '[ -n "$own" ] && bash tests/slurm/slurm_cluster.sh stop "$own" >/dev/null' EXIT
export SLURM_CONF=$dir/slurm.conf
