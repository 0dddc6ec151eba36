#include "launcher/native/native_launcher.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <chrono>

#include "launcher/core/ssh_check.h"
#include "launcher/core/status_line.h"
#include "launcher/core/supervisor.h"
#include "launcher/native/agent_launch.h"
#include "launcher/native/native_job.h"

namespace hvd::launcher {

std::unique_ptr<Launcher> NativeLauncher::make(LaunchOptions options) {
  return std::make_unique<NativeLauncher>(std::move(options));
}

std::vector<LaunchCommand> NativeLauncher::describe(const Plan& plan) const {
  return choose_agent_launch(options_, plan).make(options_)->describe(plan);
}

void NativeLauncher::check(const Plan& plan) const {
  const AgentLaunchEntry& agents = choose_agent_launch(options_, plan);
  if (options_.elastic && !agents.elastic) {
    throw UsageError(
        fmt::format("elastic training (--min-np) through {} is not built yet{}", agents.name,
                    options_.agent_launch == "auto" && !options_.rsh_agent
                        ? " (chosen because the hosts came from Slurm)"
                        : ""),
        "run it with --launcher ssh");
  }
}

Plan NativeLauncher::shown(const Plan& plan) const {
  Plan p = plan;
  apply_ssh_config(p, options_.ssh);
  return p;
}

LaunchResult NativeLauncher::run(const Plan& plan) { return launch(plan, false); }

LaunchResult NativeLauncher::check_network(const Plan& plan) { return launch(plan, true); }

// Whatever starts the agents (agent_launch.h), the same job runs them.
LaunchResult NativeLauncher::launch(const Plan& plan, bool check_net_only) {
  const auto started = Clock::now();
  const bool live = stderr_wants_status_line(options_.stdout_to_stderr);
  if (live) StatusLine::get().enable(STDERR_FILENO);
  const std::unique_ptr<AgentLaunch> agent_launch =
      choose_agent_launch(options_, plan).make(options_);
  StartedAgents agents = agent_launch->start(plan, started, live);
  if (!agents.ssh_failures.empty()) {
    StatusLine::get().set("");  // the table of failures follows
    LaunchResult result;
    result.launcher = std::string(name());
    result.ssh_failures = std::move(agents.ssh_failures);
    result.exit_code = to_int(exit_code_of(ErrorKind::kSsh));
    return result;
  }
  spdlog::debug("phase: agents");  // the phase lines: tests/chaos counts faults by them
  LaunchResult result;
  Clock::time_point job_ended;
  {
    Supervisor supervisor(plan, options_, std::string(name()));
    native::NativeJob job(plan, options_, check_net_only, supervisor, *agent_launch,
                          std::move(agents.agents));
    if (live) job.show_startup_progress(started);
    result = supervisor.run(job);
    job_ended = Clock::now();
    result.command = agent_launch->command(plan);
    result.hosts = job.host_facts();
    for (size_t h = 0; h < result.hosts.size() && h < agents.addresses.size(); ++h) {
      result.hosts[h].address = agents.addresses[h];
    }
    result.details = job.details();
  }  // the job's teardown (its connections, the rendezvous server)
  spdlog::debug("the job's teardown took {:.1f} ms",
                std::chrono::duration<double, std::milli>(Clock::now() - job_ended).count());
  agent_launch->finish();  // srun: while Slurm ends the step
  return result;
}

}  // namespace hvd::launcher
