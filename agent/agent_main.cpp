// hvdrun-agent: the host agent alone, for the srun step (launcher/native/srun_agents.h). It is the
// same agent as `hvdrun --agent` / `hvdrun --agent-connect` (the same library, the same protocol
// and version, checked in the hello), in a binary that links none of the launcher's libraries.
//
// Why a second binary: hvdrun links libssh and cpp-httplib, whose load-time constructors
// initialise OpenSSL and pull in libcrypto and Kerberos; loading them costs about 20 ms of CPU
// per process on the development VM against about 6 ms for this binary (`perf stat`). The srun
// step starts one agent per node, and on a launch of `true` that start-up is a good part of
// what hvdrun adds to a plain `srun` (bench/srun_bench.sh). It links libcrypto alone for its
// sealed link (agent/sealed_link.h), which initialises nothing at load time.
#include <unistd.h>

#include <cstdio>
#include <string_view>

#include "agent/agent.h"
#include "agent/agent_connect.h"
#include "agent/agent_guard.h"
#include "common/process.h"

int main(int argc, char** argv) {
  const std::string_view mode = argc == 2 ? argv[1] : "";
  // As in hvdrun: a few descriptors per probe connection; ranks get the old limit back.
  if (mode == "--agent" || mode == "--agent-connect") hvd::raise_descriptor_limit();
  // Under its guard, as in hvdrun (agent/agent_guard.h).
  if (mode == "--agent") {
    return hvd::agent::run_guarded(
        [] { return hvd::agent::run_agent(STDIN_FILENO, STDOUT_FILENO); });
  }
  if (mode == "--agent-connect") return hvd::agent::run_guarded(hvd::agent::run_connecting_agent);
  std::fputs(
      "hvdrun-agent: hvdrun's host agent, started by hvdrun itself (--agent or --agent-connect); "
      "run hvdrun instead\n",
      stderr);
  return 2;
}
