#include "launcher/local_agent.h"

#include <fmt/format.h>

#include <array>
#include <cstring>
#include <vector>

#include "common/error.h"
#include "launcher/child_process.h"

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

}  // namespace

AgentProcess start_local_agent(const std::string& hvdrun_path) {
  std::vector<std::string> env;
  for (char** p = environ; *p != nullptr; ++p) {
    const std::string_view entry(*p);
    if (login_variable(entry.substr(0, entry.find('=')))) env.emplace_back(entry);
  }
  ChildProcess child = spawn_child({hvdrun_path, "--agent"}, env, /*stdin_pipe=*/true);
  if (child.error != 0) {
    throw Error(fmt::format("cannot start the local agent {}: {}", hvdrun_path,
                            std::strerror(child.error)));
  }
  AgentProcess agent;
  agent.pid = child.pid;
  agent.to_agent = std::move(child.stdin_w);
  agent.from_agent = std::move(child.stdout_r);
  agent.agent_log = std::move(child.stderr_r);
  return agent;
}

}  // namespace hvd::launcher
