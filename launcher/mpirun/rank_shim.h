// `hvdrun --rank-shim COMMAND...`: under `hvdrun --mpi`, mpirun starts this in front of the user's
// command on every rank. mpirun cannot give each rank its own variables, so without it a rank
// under --mpi would have Open MPI's OMPI_COMM_WORLD_* only, and a script written for hvdrun or
// torchrun (RANK, LOCAL_RANK, MASTER_ADDR, ...) would not run in both modes. The shim reads Open
// MPI's per-rank variables and the plan hvdrun handed to every rank by name (-x: values never on
// a command line), sets the same contract a native launch sets (docs/environment.md), and execs
// the command: no process stays in between.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "contract/topology.h"

namespace hvd::launcher {

// The variables the shim sets for this rank, from Open MPI's OMPI_COMM_WORLD_RANK, _SIZE and
// _LOCAL_RANK and hvdrun's HVD_RANK_LAYOUT (ranks per host, "2,2") and HVD_RANK_HOSTS (the hosts
// as the user wrote them): the topology (Horovod's and torchrun's names), HOROVOD_HOSTNAME, and
// the defaults a native launch gives (OMP_NUM_THREADS=1 when ranks share the host,
// PYTHONUNBUFFERED=1), each only when unset. Pure. Throws ContractError naming the variable when
// one is missing or malformed, or when mpirun placed the rank elsewhere than hvdrun planned.
std::vector<std::pair<std::string, std::string>> rank_shim_env(const contract::EnvGetter& getenv);

// "2,2" for ranks per host; the inverse of the parser rank_shim_env uses.
std::string format_rank_layout(const std::vector<int>& ranks_per_host);

// Sets rank_shim_env(std::getenv) in this process and execs `command` (PATH lookup). Returns only
// on failure, with the exit code to use: 70 (EX_SOFTWARE) for a broken contract, 127 when the
// command is not found and 126 when it cannot be executed (a shell's codes), each after a line on
// stderr saying why.
int exec_rank_shim(const std::vector<std::string>& command);

// `hvdrun --orted-shim BASE orted ARGS...`: under `hvdrun --mpi`, when two of Open MPI's daemons
// of one job would run on one machine, mpirun starts each daemon through this (its
// orte_launch_agent). Open MPI 4 keeps a daemon's session directory under
// $TMPDIR/ompi.HOST.UID/jf.JOBFAMILY, and a starting daemon deletes that whole job-family tree
// as stale (ess_base_std_orted.c): the second daemon on a machine deletes the first one's
// directories, and that one dies while mpirun waits for it forever. So each daemon gets a TMPDIR
// of its own, a new directory under BASE (the job's, /tmp/hvdrun-mpi.JOB_ID; created 0700, and
// refused if it is a symbolic link or someone else's), then `orted ARGS...` is exec'd. The TMPDIR
// it had is kept in HVD_DAEMON_TMPDIR_WAS, for the rank shim to give the ranks back. Returns
// only on failure: 70 with a line on stderr, or 127/126 when the command cannot run.
int exec_orted_shim(const std::vector<std::string>& args);

}  // namespace hvd::launcher
