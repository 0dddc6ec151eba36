// Agents through Slurm (--launcher srun; the default inside an allocation whose hosts hvdrun took
// from Slurm): one srun step with an agent task per node, each connecting back to the launcher
// (srun_agents.h). No joining hosts while the job runs: elastic training through srun is refused.
#pragma once

#include <memory>

#include "launcher/native/agent_launch.h"

namespace hvd::launcher {

std::unique_ptr<AgentLaunch> make_srun_launch(const LaunchOptions& options);

}  // namespace hvd::launcher
