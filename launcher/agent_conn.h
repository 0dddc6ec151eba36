// One host's agent as the launcher's event loop sees it: frames in and out, its stderr, and
// whether it is gone, the same for a local child process and a remote SSH channel.
#pragma once

#include <sys/socket.h>
#include <sys/wait.h>

#include <deque>
#include <optional>
#include <string>

#include "launcher/local_agent.h"
#include "ssh/remote_agent.h"
#include "worker/interfaces.h"
#include "worker/protocol.h"

namespace hvd::launcher {

// What an agent said in its hello frame.
struct AgentHello {
  int protocol = 0;
  std::string version;
  std::string hostname;
  std::string boot_id;
  std::string ssh_connection;  // "client_ip client_port server_ip server_port", or empty
  std::vector<worker::NetInterface> interfaces;
};

// The hello frame's JSON. Missing or mistyped fields are left at their defaults (protocol 0:
// the version check then names the agent as speaking another protocol).
AgentHello parse_hello(const std::string& payload);

class AgentConn {
 public:
  AgentConn(int host, AgentProcess local) : host_index(host), local_(std::move(local)) {}
  AgentConn(int host, ssh::RemoteAgent remote) : host_index(host), remote_(std::move(remote)) {}

  int read_fd() const { return local_ ? local_->from_agent.get() : remote_->frames_fd(); }
  int write_fd() const { return local_ ? local_->to_agent.get() : remote_->frames_fd(); }
  UniqueFd& log() { return local_ ? local_->agent_log : remote_->log(); }
  // No more frames for this agent: it sees EOF on its stdin.
  void close_input() {
    if (local_) {
      local_->to_agent.reset();
    } else {
      remote_->close_input();
    }
  }
  // True once the agent is gone: the local process reaped, or the remote channel's pump done.
  bool try_reap() {
    if (reaped) return true;
    if (local_) {
      reaped = ::waitpid(local_->pid, nullptr, WNOHANG) == local_->pid;
    } else {
      reaped = eof;  // the pump closes the frames socket when the channel ends
    }
    return reaped;
  }
  bool is_remote() const { return remote_.has_value(); }

  int host_index = 0;
  worker::FrameReader reader;
  std::optional<AgentHello> hello;
  std::string log_partial;
  std::deque<std::string> log_tail;  // its last stderr lines, for "agent missing" messages
  std::optional<int> probe_port;     // its probe listener (rank 0's host: the job's MASTER_PORT)
  bool probed = false;               // its probe results arrived
  bool spec_sent = false;
  bool done = false;
  bool eof = false;
  bool reaped = false;

 private:
  std::optional<AgentProcess> local_;
  std::optional<ssh::RemoteAgent> remote_;
};

}  // namespace hvd::launcher
