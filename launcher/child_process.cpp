#include "launcher/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <unistd.h>

#include <cerrno>

namespace hvd::launcher {
namespace {

std::vector<char*> c_strings(std::vector<std::string>& in) {
  std::vector<char*> out;
  for (std::string& s : in) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

}  // namespace

ChildProcess spawn_child(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                         bool stdin_pipe) {
  ChildProcess child;
  int in[2] = {-1, -1}, out[2], err[2];
  if ((stdin_pipe && ::pipe2(in, O_CLOEXEC) != 0) || ::pipe2(out, O_CLOEXEC) != 0 ||
      ::pipe2(err, O_CLOEXEC) != 0) {
    child.error = errno;
    return child;
  }
  UniqueFd in_r(in[0]), in_w(in[1]), out_r(out[0]), out_w(out[1]), err_r(err[0]), err_w(err[1]);
  std::vector<std::string> argv_copy = argv, env_copy = env;
  std::vector<char*> c_argv = c_strings(argv_copy), c_env = c_strings(env_copy);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (stdin_pipe) {
    posix_spawn_file_actions_adddup2(&actions, in_r.get(), STDIN_FILENO);
  } else {
    posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  }
  posix_spawn_file_actions_adddup2(&actions, out_w.get(), STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, err_w.get(), STDERR_FILENO);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  sigset_t defaults;
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGPIPE);
  sigaddset(&defaults, SIGINT);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
  child.error = ::posix_spawnp(&child.pid, c_argv[0], &actions, &attr, c_argv.data(), c_env.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (child.error != 0) return child;
  child.stdin_w = std::move(in_w);
  child.stdout_r = std::move(out_r);
  child.stderr_r = std::move(err_r);
  return child;
}

}  // namespace hvd::launcher
