#include "launcher/native/agent_transport.h"

#include <signal.h>

#include <array>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/process.h"

extern char** environ;

namespace hvd::launcher {
namespace {

bool login_variable(std::string_view name) {
  constexpr std::array<std::string_view, 7> kNames{"HOME", "USER", "LOGNAME", "SHELL",
                                                   "LANG", "TZ",   "TMPDIR"};
  for (auto n : kNames) {
    if (name == n) return true;
  }
  return name.starts_with("LC_");
}

class LocalAgent final : public ChildAgent {
 public:
  using ChildAgent::ChildAgent;
  bool remote() const override { return false; }
  std::string lost_detail() const override { return ""; }
};

class SshAgent final : public AgentTransport {
 public:
  explicit SshAgent(ssh::RemoteAgent agent) : agent_(std::move(agent)) {}
  int read_fd() const override { return agent_.frames_fd(); }
  int write_fd() const override { return agent_.frames_fd(); }
  UniqueFd& log() override { return agent_.log(); }
  void close_input() override { agent_.close_input(); }
  // The pump thread closes the session at once (ssh/remote_agent.cpp); joining it is
  // ~RemoteAgent's business.
  void abandon() override { agent_.cut(); }
  // The pump thread closes the frames socket when the channel ends: EOF is the end.
  bool gone(bool frames_ended) override { return frames_ended; }
  bool remote() const override { return true; }
  std::optional<int> exit_status() const override { return agent_.exit_status(); }
  std::string lost_detail() const override { return " (the SSH connection closed)"; }

 private:
  ssh::RemoteAgent agent_;
};

}  // namespace

void ChildAgent::abandon() {
  process_.in().reset();
  if (process_.running()) process_.signal_group(SIGKILL);
}

std::unique_ptr<AgentTransport> start_local_agent(const std::string& hvdrun_path) {
  std::vector<std::string> env;
  for (char** p = environ; *p != nullptr; ++p) {
    const std::string_view entry(*p);
    if (login_variable(entry.substr(0, entry.find('=')))) env.emplace_back(entry);
  }
  ProcessSpec spec;
  spec.argv = {hvdrun_path, "--agent"};
  spec.env = std::move(env);
  spec.stdin_pipe = true;
  Process process = Process::spawn(spec);
  if (!process.started()) {
    throw LauncherError("cannot start the local agent: " + process.error(),
                        "hvdrun starts itself as the agent: check that " + hvdrun_path +
                            " is still there and executable");
  }
  return std::make_unique<LocalAgent>(std::move(process));
}

std::unique_ptr<AgentTransport> ssh_agent_transport(ssh::RemoteAgent agent) {
  return std::make_unique<SshAgent>(std::move(agent));
}

}  // namespace hvd::launcher
