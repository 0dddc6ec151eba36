#include "launcher/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <sstream>

namespace hvd::launcher {
namespace {

std::vector<char*> c_strings(std::vector<std::string>& in) {
  std::vector<char*> out;
  for (std::string& s : in) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// The program's path as posix_spawnp would find it (this process's PATH), for execve: nothing
// between fork and exec may allocate. Empty when it is nowhere.
std::string find_program(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  const char* env_path = std::getenv("PATH");
  std::istringstream dirs(env_path != nullptr ? env_path : "/usr/local/bin:/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    std::string candidate = dir.empty() ? std::string(".") : dir;
    candidate.append("/").append(name);
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return {};
}

// fork + execve, for a child that must die with the launcher: posix_spawn cannot ask for
// PR_SET_PDEATHSIG. The child calls only async-signal-safe functions before execve and reports
// an exec failure's errno through a close-on-exec pipe, so the caller sees it as posix_spawn's.
int fork_exec(pid_t* pid, const std::string& path, std::vector<char*>& c_argv,
              std::vector<char*>& c_env, int stdin_fd, int stdout_fd, int stderr_fd,
              int parent_death_signal) {
  int status[2];
  if (::pipe2(status, O_CLOEXEC) != 0) return errno;
  UniqueFd status_r(status[0]), status_w(status[1]);
  const pid_t parent = ::getpid();
  const pid_t child = ::fork();
  if (child < 0) return errno;
  if (child == 0) {
    int e = 0;
    if (::prctl(PR_SET_PDEATHSIG, parent_death_signal) != 0) e = errno;
    if (e == 0 && ::getppid() != parent) ::_exit(127);  // the launcher is already gone
    if (e == 0) ::setpgid(0, 0);
    if (e == 0 && stdin_fd >= 0 && ::dup2(stdin_fd, STDIN_FILENO) < 0) e = errno;
    if (e == 0 && stdin_fd < 0) {
      const int null_fd = ::open("/dev/null", O_RDONLY);
      if (null_fd < 0 || ::dup2(null_fd, STDIN_FILENO) < 0) e = errno;
    }
    if (e == 0 && (::dup2(stdout_fd, STDOUT_FILENO) < 0 || ::dup2(stderr_fd, STDERR_FILENO) < 0)) {
      e = errno;
    }
    if (e == 0) {
      struct sigaction dfl {};
      dfl.sa_handler = SIG_DFL;
      ::sigaction(SIGPIPE, &dfl, nullptr);
      ::sigaction(SIGINT, &dfl, nullptr);
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      ::execve(path.c_str(), c_argv.data(), c_env.data());
      e = errno;
    }
    [[maybe_unused]] auto n = ::write(status_w.get(), &e, sizeof e);
    ::_exit(127);
  }
  status_w.reset();
  int e = 0;
  long n;
  do {
    n = ::read(status_r.get(), &e, sizeof e);
  } while (n < 0 && errno == EINTR);
  if (n == static_cast<long>(sizeof e)) {  // exec failed: nothing runs
    ::waitpid(child, nullptr, 0);
    return e;
  }
  *pid = child;
  return 0;
}

}  // namespace

ChildProcess spawn_child(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                         bool stdin_pipe, int parent_death_signal) {
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

  if (parent_death_signal != 0) {
    const std::string path = find_program(argv_copy[0]);
    child.error = path.empty()
                      ? ENOENT
                      : fork_exec(&child.pid, path, c_argv, c_env, stdin_pipe ? in_r.get() : -1,
                                  out_w.get(), err_w.get(), parent_death_signal);
    if (child.error != 0) return child;
    child.stdin_w = std::move(in_w);
    child.stdout_r = std::move(out_r);
    child.stderr_r = std::move(err_r);
    return child;
  }
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
