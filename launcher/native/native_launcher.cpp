#include "launcher/native/native_launcher.h"

#include <fmt/format.h>
#include <signal.h>
#include <spdlog/spdlog.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>

#include "common/shell_quote.h"
#include "common/signal_fd.h"
#include "launcher/core/status_line.h"
#include "launcher/core/supervisor.h"
#include "launcher/native/agent_transport.h"
#include "launcher/native/native_job.h"
#include "launcher/native/remote_start.h"
#include "launcher/native/srun_agents.h"

namespace hvd::launcher {

std::unique_ptr<Launcher> NativeLauncher::make(LaunchOptions options) {
  return std::make_unique<NativeLauncher>(std::move(options));
}

std::vector<LaunchCommand> NativeLauncher::describe(const Plan& plan) const {
  if (options_.agents == AgentLaunch::kSrun) {
    return {
        {"through Slurm on this machine: one srun step, one agent task per node, which "
         "connects back (HVD_AGENT_CONNECT and HVD_AGENT_TOKEN in its environment)",
         srun_agent_argv(plan, options_)}};
  }
  std::vector<LaunchCommand> out;
  for (const HostPlan& h : plan.hosts) {
    if (h.local) {
      out.push_back(
          {"on " + h.spec.host + ", as a local child", {options_.hvdrun_path, "--agent"}});
    } else {
      out.push_back({"on " + h.spec.host + " over SSH (" + h.ssh_user + "@" +
                         format_host(h.spec.host) + ":" + std::to_string(h.ssh_port) +
                         "), through the login shell",
                     remote_agent_argv(options_.ssh.agent_path)});
    }
  }
  return out;
}

LaunchResult NativeLauncher::run(const Plan& plan) { return launch(plan, false); }

LaunchResult NativeLauncher::check_network(const Plan& plan) { return launch(plan, true); }

// Through srun: the step's agents connect back; then the same job as over SSH. The step ends
// when its agents do; it is given a few seconds, then killed (which cancels it). hvdrun waits for
// it: a step still being torn down holds the nodes' whole allocation, and a step started right
// after (the next hvdrun or srun in the script) waits for it (bench/README.md).
LaunchResult NativeLauncher::launch_through_srun(const Plan& plan, bool check_net_only) {
  const auto started = Clock::now();
  const SignalFd held{SIGINT, SIGTERM, SIGHUP};  // see launch(): srun and its agents first
  SrunAgents srun = start_srun_agents(plan, options_);
  LaunchResult result;
  Clock::time_point job_ended;
  {
    Supervisor supervisor(plan, options_, std::string(name()));
    native::NativeJob job(plan, options_, check_net_only, supervisor, std::move(srun.agents));
    if (stderr_wants_status_line(options_.stdout_to_stderr)) job.show_startup_progress(started);
    result = supervisor.run(job);
    job_ended = Clock::now();
    result.command = srun_agent_argv(plan, options_);
    result.hosts = job.host_facts();
    result.details = job.details();
  }  // the job's teardown (its connections, the rendezvous server) while Slurm ends the step
  const auto since_job = [&] {
    return std::chrono::duration<double, std::milli>(Clock::now() - job_ended).count();
  };
  spdlog::debug("the job's teardown took {:.1f} ms", since_job());
  for (int i = 0; i < 300 && !srun.srun.try_reap(); ++i) ::usleep(1000);
  spdlog::debug("srun ended {:.1f} ms after the job", since_job());
  if (!srun.srun.status()) srun.srun.signal_group(SIGKILL);
  return result;
}

LaunchResult NativeLauncher::launch(const Plan& plan, bool check_net_only) {
  if (options_.agents == AgentLaunch::kSrun) return launch_through_srun(plan, check_net_only);
  // On a terminal: a live line through the start-up, the SSH logins first (status_line.h).
  const auto started = Clock::now();
  const bool live = stderr_wants_status_line(options_.stdout_to_stderr);
  ssh::SshOptions ssh = options_.ssh;
  if (live) {
    StatusLine::get().enable(STDERR_FILENO);
    ssh.on_progress = [started](size_t done, size_t failed, size_t total) {
      StatusLine::get().set(
          fmt::format("launch: SSH logins {} of {} done, {} failed ({:.1f} s)", done, total, failed,
                      std::chrono::duration<double>(Clock::now() - started).count()));
      StatusLine::get().draw_now();
    };
  }
  if (std::any_of(plan.hosts.begin(), plan.hosts.end(),
                  [](const HostPlan& h) { return !h.local; })) {
    spdlog::debug("phase: ssh");  // the phase lines: tests/chaos counts faults by them
  }
  RemoteStart remote = start_remote_agents(plan, ssh);
  if (!remote.failures.empty()) {
    StatusLine::get().set("");  // the table of failures follows
    LaunchResult result;
    result.launcher = std::string(name());
    result.ssh_failures = std::move(remote.failures);
    result.exit_code = to_int(exit_code_of(ErrorKind::kSsh));
    return result;
  }
  // From the first local agent on, an interrupt is the Supervisor's to handle (it stops the
  // agents and reports the interrupt): held blocked until its SignalFd reads it. Unheld, its
  // default action ended hvdrun between the agent's start and the Supervisor's run, and left the
  // local agent behind (e2e "an interrupt during start-up is an interrupt and not an error",
  // beside busy loops). Before (the SSH logins) it ends hvdrun at once, and a remote agent
  // ends with its SSH channel.
  const SignalFd held{SIGINT, SIGTERM, SIGHUP};
  std::vector<AgentConn> agents;
  for (int h = 0; h < static_cast<int>(plan.hosts.size()); ++h) {
    agents.emplace_back(h, plan.hosts[h].local ? start_local_agent(options_.hvdrun_path)
                                               : ssh_agent_transport(std::move(*remote.agents[h])));
  }
  spdlog::debug("phase: agents");
  Supervisor supervisor(plan, options_, std::string(name()));
  native::NativeJob job(plan, options_, check_net_only, supervisor, std::move(agents));
  if (live) job.show_startup_progress(started);
  LaunchResult result = supervisor.run(job);
  result.command = remote_agent_argv(options_.ssh.agent_path);
  result.hosts = job.host_facts();
  for (size_t h = 0; h < result.hosts.size() && h < remote.addresses.size(); ++h) {
    result.hosts[h].address = remote.addresses[h];
  }
  result.details = job.details();
  return result;
}

}  // namespace hvd::launcher
