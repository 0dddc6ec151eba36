// hvdrun's main(): the hidden modes this binary also runs in, then the command line (cli/app.h).
#include <unistd.h>

#include <string>
#include <string_view>
#include <vector>

#include "agent/agent.h"
#include "agent/agent_connect.h"
#include "agent/agent_guard.h"
#include "cli/app.h"
#include "common/process.h"
#include "launcher/mpirun/rank_shim.h"
#include "launcher/native/rsh_launch.h"

int main(int argc, char** argv) {
  const std::string_view mode = argc >= 2 ? argv[1] : "";
  // Under --mpi, in front of the user's command on every rank (launcher/mpirun/rank_shim.h): it
  // execs, with the process as mpirun made it (no raised descriptor limit, SIGPIPE as it was).
  if (mode == "--rank-shim") {
    const int first = argc >= 3 && std::string_view(argv[2]) == "--" ? 3 : 2;
    return hvd::launcher::exec_rank_shim(std::vector<std::string>(argv + first, argv + argc));
  }
  // Under --mpi, in front of each of Open MPI's daemons on a machine that runs two of them.
  if (mode == "--rsh-agent-shim") {
    return hvd::launcher::exec_rsh_agent_shim(std::vector<std::string>(argv + 2, argv + argc));
  }
  if (mode == "--orted-shim") {
    return hvd::launcher::exec_orted_shim(std::vector<std::string>(argv + 2, argv + argc));
  }
  // A few descriptors per remote host (the launcher), per probe connection (an agent): the
  // default soft limit of 1024 is a few hundred hosts. Ranks get the old limit back.
  hvd::raise_descriptor_limit();
  // The host agent is this binary in a hidden mode; it takes no other arguments. It runs under
  // its guard (agent/agent_guard.h): nothing a rank started outlives it.
  if (argc == 2 && mode == "--agent") {
    return hvd::agent::run_guarded(
        [] { return hvd::agent::run_agent(STDIN_FILENO, STDOUT_FILENO); });
  }
  // The same agent started by srun: it connects back to the launcher (agent/agent_connect.h).
  if (argc == 2 && mode == "--agent-connect") {
    return hvd::agent::run_guarded(hvd::agent::run_connecting_agent);
  }
  return hvd::cli::run(argc, argv);
}
