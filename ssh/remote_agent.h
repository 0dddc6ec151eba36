// The host agent on a remote host: one exec channel (`AGENT_PATH --agent`) on the session that
// passed the SSH stages (ssh/connection.h), bridged to local sockets so the launcher's event loop
// treats it like a local agent's pipes. A pump thread owns the session from then on (libssh
// sessions are used by one thread only).
//
// Closing the launcher's end of `frames` (or shutting down its write side) sends EOF to the
// agent: its dead-man switch stops the ranks. A cut link ends the pump, which closes `frames`.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "common/unique_fd.h"
#include "ssh/connection.h"

namespace hvd::ssh {

class RemoteAgent {
 public:
  // Starts `command` on the connection. Throws RemoteError if the host refuses the channel or
  // the command, LauncherError if the local sockets cannot be made.
  RemoteAgent(std::unique_ptr<Connection> connection, const std::string& command);
  RemoteAgent(RemoteAgent&&) = default;
  RemoteAgent& operator=(RemoteAgent&&) = default;
  ~RemoteAgent();  // joins the pump: close `frames` first, or it waits for the agent to exit

  int frames_fd() const { return frames_.get(); }  // bidirectional: frames both ways
  UniqueFd& log() { return log_; }                 // the agent's stderr
  // Closes our side of the frames socket for writing: the agent sees EOF on its stdin. The
  // session stays open a few seconds for the agent to finish (kLingerAfterEof).
  void close_input();
  // Closes the input and the session at once, without the linger: for an agent that has nothing
  // of the job to wind down (it never said hello) or that is given up on.
  void cut();
  // The agent command's exit status once its channel ended (nullopt before, or when the link
  // went away without one; -1 for a signal). Safe to call from the launcher's thread.
  std::optional<int> exit_status() const;

 private:
  UniqueFd frames_;
  UniqueFd log_;
  std::shared_ptr<std::atomic<bool>> cut_ = std::make_shared<std::atomic<bool>>(false);
  std::shared_ptr<std::atomic<int>> exit_status_ =
      std::make_shared<std::atomic<int>>(kNoExitStatus);
  static constexpr int kNoExitStatus = -1000;
  std::thread pump_;
};

}  // namespace hvd::ssh
