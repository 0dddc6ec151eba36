// Running `hvdrun --mpi`: the SSH check of every remote host first (the same rows and exit 69 as
// --check-ssh), then Open MPI's mpirun as a child with the argv from mpi_command.h. Its tagged
// output is parsed back into ranks and streams and goes through the same OutputRouter as native
// mode; SIGINT/SIGTERM are forwarded; the exit code is mpirun's, which is the failed rank's.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "launcher/native_launch.h"
#include "launcher/plan.h"

namespace hvd::launcher {

struct MpiLaunchOptions {
  std::string mpirun = "mpirun";
  std::string cwd;
  std::vector<std::string> extra_args;  // --mpi-args, split into words
  std::optional<std::string> output_dir;
  ssh::SshOptions ssh;
  // The hosts as hvdrun's network check found them (by host): given, run_mpi does not log in
  // to check them again.
  std::vector<HostFacts> known_hosts;
};

// Fills the parts of LaunchResult that MPI mode knows: exit_code, first_failure (when mpirun
// names the rank), the failed rank's stderr tail, interrupted_by, ssh_failures.
LaunchResult run_mpi(const Plan& plan, const MpiLaunchOptions& options);

// "[1,3]<stderr>:text" -> rank 3, stderr, "text"; nullopt for mpirun's own lines.
struct TaggedLine {
  int rank = 0;
  bool is_stderr = false;
  std::string text;
};
std::optional<TaggedLine> parse_tagged_line(std::string_view line);

// The rank mpirun names in "Process name: [[12345,1],2]", if any.
std::optional<int> failed_rank_from_mpirun(std::string_view text);

}  // namespace hvd::launcher
