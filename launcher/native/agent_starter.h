// Elastic training: one host's agent started while the job runs (a host the discovery script
// listed, or one whose cooldown ended), without stopping the launcher's loop. The SSH login (the
// stages and codes of --check-ssh) and the agent's start run on a thread of their own; the loop
// polls fd() and takes the result once it is readable. A local host's agent is a child process,
// started at once.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "common/unique_fd.h"
#include "launcher/native/agent_transport.h"
#include "ssh/options.h"

namespace hvd::launcher {

class AgentStarter {
 public:
  struct Result {
    std::unique_ptr<AgentTransport> transport;  // null when it failed
    std::string error;                          // why, with what to do
  };

  // `target`: the host as the discovery listed it (user@ and its ssh config apply).
  AgentStarter(ssh::SshTarget target, bool local, const ssh::SshOptions& options,
               const std::string& hvdrun_path);
  ~AgentStarter();  // cancels a login still running and joins its thread
  AgentStarter(const AgentStarter&) = delete;
  AgentStarter& operator=(const AgentStarter&) = delete;

  const std::string& host() const { return host_; }
  int fd() const { return ready_read_.get(); }  // readable once the result is there
  bool ready() const;
  Result take();  // once ready()

 private:
  struct Shared;
  std::string host_;
  UniqueFd ready_read_;
  std::shared_ptr<Shared> shared_;
  std::jthread thread_;
};

}  // namespace hvd::launcher
