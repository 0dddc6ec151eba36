# Sourced by the checks in this folder (tests/slurm/README.md): `use_test_cluster DIR` points
# this shell's salloc, srun and sbatch at the test cluster in DIR and nothing else. The shell's
# own SLURM_* variables go (hvdrun would read them: a check run inside an allocation would see
# that allocation's hosts), and so do SALLOC_*, SRUN_* and SBATCH_* defaults; SLURM_CONF names
# the cluster's configuration.
# shellcheck shell=bash
use_test_cluster() {
    local var
    while IFS= read -r var; do
        unset "$var"
    done < <(compgen -e | grep -E '^(SLURM_|SALLOC_|SRUN_|SBATCH_)' || true)
    export SLURM_CONF=$1/slurm.conf
}
