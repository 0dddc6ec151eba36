#include "launcher/local_agent.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <spawn.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <vector>

#include "common/error.h"

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
  int in[2], out[2], err[2];
  if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) {
    throw Error(fmt::format("cannot create pipes for the local agent: {}", std::strerror(errno)));
  }
  UniqueFd in_r(in[0]), in_w(in[1]), out_r(out[0]), out_w(out[1]), err_r(err[0]), err_w(err[1]);

  std::vector<std::string> env_strings;
  for (char** p = environ; *p != nullptr; ++p) {
    const std::string_view entry(*p);
    if (login_variable(entry.substr(0, entry.find('=')))) env_strings.emplace_back(entry);
  }
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string path = hvdrun_path;
  std::string flag = "--agent";
  std::array<char*, 3> argv{path.data(), flag.data(), nullptr};

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in_r.get(), STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, out_w.get(), STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, err_w.get(), STDERR_FILENO);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);  // we block signals for our signalfd; it must not
  sigset_t defaults;
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGPIPE);
  sigaddset(&defaults, SIGINT);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  // Its own process group: a Ctrl-C in the terminal reaches hvdrun, which stops the ranks in
  // order; it must not hit every rank at once behind hvdrun's back.
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, path.c_str(), &actions, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    throw Error(fmt::format("cannot start the local agent {}: {}", path, std::strerror(rc)));
  }
  AgentProcess agent;
  agent.pid = pid;
  agent.to_agent = std::move(in_w);
  agent.from_agent = std::move(out_r);
  agent.agent_log = std::move(err_r);
  return agent;
}

}  // namespace hvd::launcher
