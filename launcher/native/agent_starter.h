// Elastic training: one host's agent started while the job runs (a host the discovery script
// listed, or one whose cooldown ended), without stopping the launcher's loop. What starting means
// is the agent launch's (agent_launch.h: an SSH login with the stages and codes of --check-ssh,
// a local child, a command of the user's); here it runs on a thread of its own, and the loop
// polls fd() and takes the result once it is readable.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "common/unique_fd.h"
#include "launcher/native/agent_transport.h"

namespace hvd::launcher {

class AgentStarter {
 public:
  struct Result {
    std::unique_ptr<AgentTransport> transport;  // null when it failed
    std::string error;                          // why, with what to do
  };
  using Work = std::function<Result()>;

  // `work` runs on a thread of its own; `cancel` (may be empty) makes a `work` still running
  // return soon: the destructor calls it, then joins.
  AgentStarter(std::string host, Work work, std::function<void()> cancel);
  // Already done (a child started at once): ready() from the start.
  AgentStarter(std::string host, Result result);
  // The agent of a host that is this machine, as a local child (every way of starting agents
  // does this for such a host): done at once.
  static std::unique_ptr<AgentStarter> local(const std::string& host,
                                             const std::string& hvdrun_path);
  ~AgentStarter();
  AgentStarter(const AgentStarter&) = delete;
  AgentStarter& operator=(const AgentStarter&) = delete;

  const std::string& host() const { return host_; }
  int fd() const { return ready_read_.get(); }  // readable once the result is there
  bool ready() const;
  Result take();  // once ready()

 private:
  struct Shared;
  void open_pipe();
  std::string host_;
  UniqueFd ready_read_;
  std::shared_ptr<Shared> shared_;
  std::function<void()> cancel_;
  std::jthread thread_;
};

}  // namespace hvd::launcher
