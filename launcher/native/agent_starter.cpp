#include "launcher/native/agent_starter.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <unistd.h>

#include "common/error.h"
#include "common/shell_quote.h"
#include "launcher/native/remote_start.h"
#include "ssh/connection.h"
#include "ssh/remote_agent.h"

namespace hvd::launcher {

struct AgentStarter::Shared {
  std::mutex mutex;
  Result result;
  UniqueFd ready_write;
  ssh::CheckControl control;  // cancel() ends a login still running
};

namespace {

void post(AgentStarter::Result& slot, std::mutex& mutex, AgentStarter::Result result,
          const UniqueFd& ready) {
  {
    std::lock_guard<std::mutex> lock(mutex);
    slot = std::move(result);
  }
  const char byte = 1;
  [[maybe_unused]] const ssize_t n = ::write(ready.get(), &byte, 1);
}

}  // namespace

AgentStarter::AgentStarter(ssh::SshTarget target, bool local, const ssh::SshOptions& options,
                           const std::string& hvdrun_path)
    : host_(target.host), shared_(std::make_shared<Shared>()) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw LauncherError("no pipe for a joining host's agent");
  ready_read_.reset(fds[0]);
  shared_->ready_write.reset(fds[1]);
  if (local) {
    Result r;
    try {
      r.transport = start_local_agent(hvdrun_path);
    } catch (const Error& e) {
      r.error = e.what();
    }
    post(shared_->result, shared_->mutex, std::move(r), shared_->ready_write);
    return;
  }
  thread_ = std::jthread([shared = shared_, target = std::move(target), options] {
    Result r;
    try {
      ssh::CpuSlots slots(1);
      ssh::Login login =
          ssh::connect_and_login(target, options, slots, shared->control, ssh::Clock::now());
      if (!login.connection) {
        r.error = fmt::format("{}: {}{}", ssh::to_string(login.result.code), login.result.message,
                              login.result.hint.empty() ? "" : " (" + login.result.hint + ")");
      } else {
        shared->control.unwatch();
        login.connection->control = nullptr;
        r.transport = ssh_agent_transport(ssh::RemoteAgent(
            std::move(login.connection), shell_join(remote_agent_argv(options.agent_path))));
      }
    } catch (const std::exception& e) {
      r.error = e.what();
    }
    post(shared->result, shared->mutex, std::move(r), shared->ready_write);
  });
}

AgentStarter::~AgentStarter() {
  if (thread_.joinable()) {
    shared_->control.cancel();
    thread_.join();
  }
}

bool AgentStarter::ready() const {
  pollfd p{ready_read_.get(), POLLIN, 0};
  return ::poll(&p, 1, 0) > 0;
}

AgentStarter::Result AgentStarter::take() {
  if (thread_.joinable()) thread_.join();
  std::lock_guard<std::mutex> lock(shared_->mutex);
  return std::move(shared_->result);
}

}  // namespace hvd::launcher
