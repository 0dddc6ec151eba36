#include "launcher/native/ssh_launch.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>

#include "common/shell_quote.h"
#include "launcher/core/status_line.h"
#include "launcher/native/remote_start.h"
#include "ssh/connection.h"
#include "ssh/remote_agent.h"

namespace hvd::launcher {
namespace {

class SshLaunch final : public AgentLaunch {
 public:
  explicit SshLaunch(const LaunchOptions& options) : options_(options) {}

  std::string_view name() const override { return "ssh"; }

  std::vector<LaunchCommand> describe(const Plan& plan) const override {
    std::vector<LaunchCommand> out;
    for (const HostPlan& h : plan.hosts) {
      if (h.local) {
        out.push_back(local_agent_command(h, options_.hvdrun_path));
      } else {
        out.push_back({"on " + h.spec.host + " over SSH (" + h.ssh_user + "@" +
                           format_host(h.spec.host) + ":" + std::to_string(h.ssh_port) +
                           "), through the login shell",
                       remote_agent_argv(options_.ssh.agent_path)});
      }
    }
    return out;
  }

  std::vector<std::string> command(const Plan&) const override {
    return remote_agent_argv(options_.ssh.agent_path);
  }

  StartedAgents start(const Plan& plan, Clock::time_point began, bool live) override {
    // On a terminal: a live line through the SSH logins (status_line.h).
    ssh::SshOptions ssh = options_.ssh;
    if (live) {
      ssh.on_progress = [began](size_t done, size_t failed, size_t total) {
        StatusLine::get().set(
            fmt::format("launch: SSH logins {} of {} done, {} failed ({:.1f} s)", done, total,
                        failed, std::chrono::duration<double>(Clock::now() - began).count()));
        StatusLine::get().draw_now();
      };
    }
    if (std::any_of(plan.hosts.begin(), plan.hosts.end(),
                    [](const HostPlan& h) { return !h.local; })) {
      spdlog::debug("phase: ssh");  // the phase lines: tests/chaos counts faults by them
    }
    RemoteStart remote = start_remote_agents(plan, ssh);
    StartedAgents out;
    if (!remote.failures.empty()) {
      out.ssh_failures = std::move(remote.failures);
      return out;
    }
    // Before (the SSH logins) an interrupt ends hvdrun at once, and a remote agent ends with
    // its SSH channel; from the first local agent on it is the Supervisor's.
    out.held_signals =
        std::make_unique<SignalFd>(std::initializer_list<int>{SIGINT, SIGTERM, SIGHUP});
    for (int h = 0; h < static_cast<int>(plan.hosts.size()); ++h) {
      out.agents.emplace_back(h, plan.hosts[h].local
                                     ? start_local_agent(options_.hvdrun_path)
                                     : ssh_agent_transport(std::move(*remote.agents[h])));
    }
    out.addresses = std::move(remote.addresses);
    return out;
  }

  std::unique_ptr<AgentStarter> start_one(const HostSpec& host, bool local) override {
    if (local) return AgentStarter::local(host.host, options_.hvdrun_path);
    // The login (the stages and codes of --check-ssh) off the loop; cancel() ends one still
    // running.
    auto control = std::make_shared<ssh::CheckControl>();
    const ssh::SshTarget target{host.host, host.port, host.user};
    const ssh::SshOptions options = options_.ssh;
    auto work = [control, target, options]() {
      AgentStarter::Result r;
      ssh::CpuSlots slots(1);
      ssh::Login login =
          ssh::connect_and_login(target, options, slots, *control, ssh::Clock::now());
      if (!login.connection) {
        r.error = fmt::format("{}: {}{}", ssh::to_string(login.result.code), login.result.message,
                              login.result.hint.empty() ? "" : " (" + login.result.hint + ")");
        return r;
      }
      control->unwatch();
      login.connection->control = nullptr;
      r.transport = ssh_agent_transport(ssh::RemoteAgent(
          std::move(login.connection), shell_join(remote_agent_argv(options.agent_path))));
      return r;
    };
    return std::make_unique<AgentStarter>(host.host, std::move(work),
                                          [control] { control->cancel(); });
  }

 private:
  LaunchOptions options_;
};

}  // namespace

std::unique_ptr<AgentLaunch> make_ssh_launch(const LaunchOptions& options) {
  return std::make_unique<SshLaunch>(options);
}

}  // namespace hvd::launcher
