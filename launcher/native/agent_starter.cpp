#include "launcher/native/agent_starter.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include "common/error.h"

namespace hvd::launcher {

struct AgentStarter::Shared {
  std::mutex mutex;
  Result result;
  UniqueFd ready_write;

  void post(Result r) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      result = std::move(r);
    }
    const char byte = 1;
    [[maybe_unused]] const ssize_t n = ::write(ready_write.get(), &byte, 1);
  }
};

void AgentStarter::open_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw LauncherError("no pipe for a joining host's agent");
  ready_read_.reset(fds[0]);
  shared_->ready_write.reset(fds[1]);
}

AgentStarter::AgentStarter(std::string host, Work work, std::function<void()> cancel)
    : host_(std::move(host)), shared_(std::make_shared<Shared>()), cancel_(std::move(cancel)) {
  open_pipe();
  thread_ = std::jthread([shared = shared_, work = std::move(work)] {
    Result r;
    try {
      r = work();
    } catch (const std::exception& e) {
      r.transport.reset();
      r.error = e.what();
    }
    shared->post(std::move(r));
  });
}

AgentStarter::AgentStarter(std::string host, Result result)
    : host_(std::move(host)), shared_(std::make_shared<Shared>()) {
  open_pipe();
  shared_->post(std::move(result));
}

std::unique_ptr<AgentStarter> AgentStarter::local(const std::string& host,
                                                  const std::string& hvdrun_path) {
  Result r;
  try {
    r.transport = start_local_agent(hvdrun_path);
  } catch (const Error& e) {
    r.error = e.what();
  }
  return std::make_unique<AgentStarter>(host, std::move(r));
}

AgentStarter::~AgentStarter() {
  if (thread_.joinable()) {
    if (cancel_) cancel_();
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
