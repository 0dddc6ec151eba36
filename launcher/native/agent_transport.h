// How the launcher reaches one host's agent: a byte stream both ways (the frames of
// agent/protocol.h), the agent's diagnostics, and how to stop it. The native launch's event
// loop sees only this interface; each way of starting an agent is one implementation: a local
// child process (start_local_agent) and an SSH exec channel (ssh_agent_transport). A new way (an
// agent that connects back over TCP, say) is one more implementation; the loop does not change.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agent/interfaces.h"
#include "agent/protocol.h"
#include "common/error.h"
#include "common/process.h"
#include "common/unique_fd.h"
#include "ssh/remote_agent.h"

namespace hvd::launcher {

// How a host and the launcher see each other, when the transport knows it (an agent that
// connected back); over SSH the agent's hello says it (SSH_CONNECTION).
struct AgentAddresses {
  std::string launcher_address;  // the launcher's address as that host reaches it
  std::string reached_at;        // the host's own address: where its ranks listen
};

class AgentTransport {
 public:
  virtual ~AgentTransport() = default;

  virtual int read_fd() const = 0;   // frames from the agent (poll it for POLLIN)
  virtual int write_fd() const = 0;  // frames to the agent (written whole, blocking)
  // The agent's stderr (diagnostics), line by line; invalid once it closed or where there is none.
  virtual UniqueFd& log() = 0;
  // No more frames: the agent sees EOF on its stdin (its dead-man switch stops its ranks).
  virtual void close_input() = 0;
  // Gives up on an agent that does not answer (frozen, or its link silently cut): a local one is
  // killed (its ranks get their parent-death signal), a remote one's SSH session is closed at
  // once (sshd closes the agent's stdin, its dead-man switch stops its ranks). Never blocks.
  virtual void abandon() = 0;
  // read_fd() reached EOF. A TCP link closes its end too: its agent reads (and drops) what the
  // launcher still sends until then, since closing with bytes unread would reset the link and
  // throw away what of the agent's the launcher had not read yet (agent/agent_connect.cpp).
  virtual void frames_ended() {}
  // True once the agent is gone for good. `frames_ended`: read_fd() has reached EOF.
  virtual bool gone(bool frames_ended) = 0;
  // A remote agent command's exit status once its channel ended (nullopt: not known).
  virtual std::optional<int> exit_status() const { return std::nullopt; }
  // Reached over the network: its hello's SSH_CONNECTION says where (a local child has none).
  virtual bool remote() const = 0;
  // What losing this agent means, for the message: " (the SSH connection closed)", or "".
  virtual std::string lost_detail() const = 0;
  // Who the lines of log() come from, for the launcher's log ("": the lines say it themselves).
  virtual std::string log_label(const std::string& host) const { return "agent on " + host; }
  // Where the host's ranks listen and reach the launcher, when the transport decides it (an
  // agent that connected back knows; --rsh-agent's chooses from the interfaces of the agent's
  // hello); nullopt: the hello's SSH_CONNECTION says it. Throws hvd::Error when it cannot.
  virtual std::optional<AgentAddresses> addresses(
      const std::vector<agent::NetInterface>& /*agent_interfaces*/) const {
    return std::nullopt;
  }
  // Why the agent is gone before its hello, when the transport can say it better than the
  // launch's SSH-worded messages (`said`: its last stderr lines, " / "-joined); nullopt: those.
  virtual std::optional<Failure> failed_before_hello(const std::string& /*said*/) const {
    return std::nullopt;
  }
  // The command line that reproduces this agent's start, for messages ("": none to show).
  virtual std::string command_line() const { return ""; }
  // Bytes read from read_fd(), into the agent's frame reader: as they came, or opened (a sealed
  // link: agent/sealed_link.h, whose agent::SealError says a record was refused).
  virtual void received(std::string_view bytes, agent::FrameReader& reader) { reader.feed(bytes); }
  // An encoded frame as it goes to write_fd(): as it is, or sealed.
  virtual std::string outgoing(std::string frame) { return frame; }
};

// An agent that is our child process, its stdin and stdout the frames and its stderr the log:
// the local agent, and a command of the user's that starts one elsewhere (--rsh-agent). Giving
// up on it kills its process group; it is gone once reaped.
class ChildAgent : public AgentTransport {
 public:
  explicit ChildAgent(Process process) : process_(std::move(process)) {}
  int read_fd() const override { return process_.out().get(); }
  int write_fd() const override { return process_.in().get(); }
  UniqueFd& log() override { return process_.err(); }
  void close_input() override { process_.in().reset(); }
  void abandon() override;
  bool gone(bool) override { return process_.try_reap(); }

 protected:
  mutable Process process_;  // mutable: a subclass may reap it while explaining its end
};

// `hvdrun_path --agent` as a local child with pipes, and a login-like environment (HOME, USER,
// LOGNAME, SHELL, LANG, LC_*, TZ, TMPDIR from ours), as sshd would give a remote agent: the
// ranks' other variables come only from the plan. Throws LauncherError if it cannot start.
std::unique_ptr<AgentTransport> start_local_agent(const std::string& hvdrun_path);

// An agent already started over SSH (ssh/remote_agent.h).
std::unique_ptr<AgentTransport> ssh_agent_transport(ssh::RemoteAgent agent);

}  // namespace hvd::launcher
