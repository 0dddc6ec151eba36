#include "launcher/native/remote_start.h"

#include <algorithm>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

#include "common/error.h"
#include "common/shell_quote.h"
#include "ssh/connection.h"

namespace hvd::launcher {

std::vector<std::string> remote_agent_argv(const std::string& agent_path) {
  return {"exec", agent_path, "--agent"};
}

RemoteStart start_remote_agents(const Plan& plan, const ssh::SshOptions& options) {
  const size_t n = plan.hosts.size();
  std::vector<ssh::CheckControl> controls(n);  // outlives `logins`: connections unwatch on exit
  std::vector<std::optional<ssh::Login>> logins(n);
  std::vector<std::exception_ptr> errors(n);
  ssh::CpuSlots slots(std::max(1, options.concurrency));
  // Progress for options.on_progress: logins finished, of which failed.
  std::mutex mutex;
  std::condition_variable changed;
  size_t done = 0, failed = 0;
  const size_t remote = static_cast<size_t>(std::count_if(
      plan.hosts.begin(), plan.hosts.end(), [](const HostPlan& h) { return !h.local; }));
  {
    std::vector<std::jthread> threads;
    for (size_t h = 0; h < n; ++h) {
      if (plan.hosts[h].local) continue;
      threads.emplace_back([&, h] {
        const HostPlan& host = plan.hosts[h];
        try {
          logins[h] = ssh::connect_and_login({host.spec.host, host.spec.port, host.spec.user},
                                             options, slots, controls[h], ssh::Clock::now());
        } catch (...) {
          errors[h] = std::current_exception();
        }
        std::lock_guard<std::mutex> lock(mutex);
        ++done;
        failed += errors[h] || !logins[h] || !logins[h]->connection;
        changed.notify_all();
      });
    }
    // Each login has its own deadline (--ssh-timeout), so this wait ends.
    if (options.on_progress && remote > 0) {
      std::unique_lock<std::mutex> lock(mutex);
      options.on_progress(done, failed, remote);
      while (done < remote) {
        changed.wait_for(lock, ssh::kProgressEvery, [&] { return done == remote; });
        options.on_progress(done, failed, remote);
      }
    }
  }  // all joined

  RemoteStart out;
  out.agents.resize(n);
  out.addresses.resize(n);
  for (size_t h = 0; h < n; ++h) {
    if (errors[h]) std::rethrow_exception(errors[h]);
    if (logins[h] && !logins[h]->connection) out.failures.push_back(logins[h]->result);
    if (logins[h]) out.addresses[h] = logins[h]->result.address;
  }
  if (!out.failures.empty()) return out;  // the sessions close here; nothing was started

  const std::string command = shell_join(remote_agent_argv(options.agent_path));
  for (size_t h = 0; h < n; ++h) {
    if (!logins[h]) continue;
    // The controls die with this function; the connection lives on in the agent's pump thread.
    controls[h].unwatch();
    logins[h]->connection->control = nullptr;
    out.agents[h].emplace(std::move(logins[h]->connection), command);
  }
  return out;
}

}  // namespace hvd::launcher
