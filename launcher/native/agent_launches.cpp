// The table of agent launches (agent_launch.h) and the choice among them: the only file that
// names them all.
#include <unistd.h>

#include <array>
#include <cstdlib>
#include <sstream>
#include <string>

#include "common/error.h"
#include "launcher/native/agent_launch.h"
#include "launcher/native/rsh_launch.h"
#include "launcher/native/srun_launch.h"
#include "launcher/native/ssh_launch.h"

namespace hvd::launcher {
namespace {

// One line each: --launcher's value, what it is, whether a joining host can be started mid-job.
constexpr std::array<AgentLaunchEntry, 3> kAgentLaunches{{
    {"ssh", "one SSH session per remote host, a local child for this machine", true,
     &make_ssh_launch},
    {"srun", "one Slurm step with an agent task per node, which connects back", false,
     &make_srun_launch},
    {"rsh", "--rsh-agent TEMPLATE: a command of the user's per host (kubectl exec, ...)", true,
     &make_rsh_launch},
}};

const AgentLaunchEntry& entry(std::string_view name) {
  for (const AgentLaunchEntry& e : kAgentLaunches) {
    if (e.name == name) return e;
  }
  throw UsageError("--launcher " + std::string(name) + ": no such way to start agents",
                   "use --launcher ssh, srun or auto, or --rsh-agent TEMPLATE");
}

bool on_path(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path != nullptr ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    if (!dir.empty() && ::access((dir + "/" + program).c_str(), X_OK) == 0) return true;
  }
  return false;
}

}  // namespace

std::span<const AgentLaunchEntry> agent_launches() { return kAgentLaunches; }

const AgentLaunchEntry& choose_agent_launch(const LaunchOptions& options, const Plan& plan) {
  if (options.rsh_agent) return entry("rsh");
  const bool in_allocation = std::getenv("SLURM_JOB_ID") != nullptr;
  if (options.agent_launch == "srun") {
    if (!in_allocation) {
      throw UsageError("--launcher srun: not inside a Slurm allocation (SLURM_JOB_ID is not set)",
                       "run hvdrun in salloc or an sbatch script, or use --launcher ssh");
    }
    return entry("srun");
  }
  if (options.agent_launch == "auto") {
    return entry(plan.hosts_origin.kind == "slurm" && on_path("srun") ? "srun" : "ssh");
  }
  return entry(options.agent_launch);
}

}  // namespace hvd::launcher
