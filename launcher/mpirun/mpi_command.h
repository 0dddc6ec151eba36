// MPI mode (`hvdrun --mpi`): the Open MPI `mpirun` command line users never have to write, from
// the same plan, SSH options and environment rules as native mode
// (docs/cli.md, "MPI mode").
// Pure but for the `mpirun --version` calls below: the caller runs the SSH check and passes what it
// found.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "launcher/mpirun/mpirun_output.h"
#include "launcher/plan/plan.h"
#include "ssh/options.h"

namespace hvd::launcher {

struct MpiVersion {
  std::string implementation;  // "Open MPI"
  int major = 0;
  int minor = 0;
  std::string text;  // the version as printed, "4.1.4"
};

// Parses `mpirun --version` output. Open MPI 4.x and 5.x are supported: anything else (Open MPI
// 3 or 6, MPICH, Intel MPI, unrecognisable output) is a UsageError saying what was found and what
// to do.
MpiVersion parse_mpirun_version(std::string_view output);

// What Open MPI 5 (mpirun on PRRTE) spells otherwise than Open MPI 4 (on ORTE) among the
// arguments hvdrun writes, and how it tags output. The one place where the two differ.
struct MpirunDialect {
  int major = 4;
  // The flag for the launch runtime's parameters (ssh, daemons, its own TCP) and for the MPI
  // library's (pml, btl): Open MPI 4 takes -mca for both; 5 --prtemca and --mca, and ignores
  // ORTE's names (plm_rsh_args under -mca is dropped without a word: ssh went to port 22).
  std::string_view runtime_flag, mpi_flag;
  std::string_view plm;           // the ssh launcher's parameters: plm_rsh_* / plm_ssh_*
  std::string_view launch_agent;  // the daemon's command: orte_launch_agent / prte_launch_agent
  std::string_view
      oob_include;  // the runtime's TCP interfaces: oob_tcp_if_include / prte_if_include
  std::string_view shared_memory;  // the shared-memory BTL: vader / sm
  bool has_openib = true;          // 5 removed the verbs BTL
  std::string_view bind_to, map_by, wdir;
  TagEnd tag_end = TagEnd::kColon;
};
const MpirunDialect& mpirun_dialect(int major);

// Runs `MPIRUN --version` (PATH lookup) and parses it: Open MPI 4 or 5, else a UsageError that
// says what was found or that it cannot be run.
MpiVersion check_mpirun(const std::string& mpirun);

// The Open MPI major version the dry run writes mpirun's command for: check_mpirun's, or 4 where
// mpirun cannot be run or is not Open MPI 4 or 5 (the launch itself then says why).
int dry_run_mpi_major(const std::string& mpirun);

// `mpirun --version`'s first line (mpirun from PATH), or nullopt when mpirun cannot be run
// (`hvdrun --check-build`).
std::optional<std::string> mpirun_version_line();

struct MpiCommandInput {
  std::string mpirun = "mpirun";
  int mpi_major = 4;  // mpirun's Open MPI version (parse_mpirun_version): mpirun_dialect's key
  bool as_root = false;
  bool same_machine = false;  // two host entries share a boot id: Open MPI's vader would crash
  // Two of Open MPI's daemons (mpirun counts as one) would run on one machine: they share one
  // session directory, and each writes the hwloc topology into the same `hwloc.sm` file there at
  // once, which crashes one of them now and then (SIGSEGV in hwloc_shmem_topology_write; mpirun
  // then waits for that daemon forever). `-mca rtc_hwloc_vmhole none` turns that shared file off;
  // ranks read the topology themselves instead.
  bool daemons_share_machine = false;
  // With daemons_share_machine: each daemon starts through the shim's `--orted-shim BASE`
  // (`-mca orte_launch_agent`, launcher/mpirun/rank_shim.h), for a session directory of its own
  // under BASE: a starting daemon deletes its job family's session tree as stale, and on a shared
  // machine that is the other daemon's, which then dies while mpirun waits for it.
  std::string session_dir_base;
  // Inside a Slurm allocation whose nodes hvdrun took from Slurm: mpirun starts its daemons
  // through Slurm itself (`-mca plm slurm`), so no SSH options; nodes that are one machine get
  // `btl self,tcp` (faster to start than `^vader`, which leaves other components probing).
  bool through_slurm = false;
  std::vector<std::string> host_addresses;  // numeric address each host was reached at
  ssh::SshOptions ssh;
  std::string cwd;
  std::vector<std::string> extra_args;  // --mpi-args, split into words
  // --binding-args, in words: instead of hvdrun's "-bind-to none -map-by slot" (horovodrun's
  // default binding). The rank shim still checks that each rank landed on its planned slot.
  std::optional<std::vector<std::string>> binding_args;
  // The rank shim (launcher/mpirun/rank_shim.h) mpirun starts in front of the command on every
  // rank: the hvdrun the hosts run (--agent-path), and the variables it reads, forwarded by name
  // with -x (their values go into mpirun's environment, never on its command line). Empty shim: the
  // command alone.
  std::string shim;
  std::vector<std::pair<std::string, std::string>> shim_env;
  // --rsh-agent TEMPLATE: mpirun starts its daemons through it (plm_rsh_agent `SHIM
  // --rsh-agent-shim`, the template in mpirun's environment: launcher/native/rsh_launch.h), not
  // over SSH.
  std::optional<std::string> rsh_agent;
  // --dry-run: what only the network check finds out (the addresses the hosts were reached at,
  // whether two of them are one machine) shows as "<set at launch: ...>".
  bool placeholders = false;
};

// The argv to exec: every forwarded variable as `-x NAME` (values stay in mpirun's environment,
// never on its command line), then the user's command as separate words. Throws UsageError for
// what mpirun cannot express (per-host ports or users, paths with spaces in plm_rsh_args).
std::vector<std::string> mpirun_argv(const Plan& plan, const MpiCommandInput& input);

// Names of the variables to forward with -x, from a rank's planned environment.
std::vector<std::string> forwarded_names(const Plan& plan);

// The variables hvdrun --rank-shim reads: the plan's layout and hosts (HVD_RANK_LAYOUT,
// HVD_RANK_HOSTS) and rank 0's MASTER_ADDR and MASTER_PORT.
std::vector<std::pair<std::string, std::string>> shim_environment(const Plan& plan,
                                                                  const std::string& master_addr,
                                                                  const std::string& master_port);

// The CIDRs for btl_tcp_if_include / oob_tcp_if_include: 127.0.0.0/8 for loopback hosts (Open
// MPI excludes 127/8 by default), each other address as a /31 (Open MPI 4.1 reads a /32 as /0).
std::string tcp_include(const std::vector<std::string>& addresses);

}  // namespace hvd::launcher
