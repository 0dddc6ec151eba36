#include "launcher/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
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

// fork + execvpe, for a child that must die with the launcher: posix_spawn cannot ask for
// PR_SET_PDEATHSIG. Before the exec the child calls only functions that do not allocate
// (execvpe's PATH search uses the stack since glibc 2.24) and reports an exec failure's errno
// through a close-on-exec pipe, so the caller sees it as posix_spawnp's.
int fork_exec(pid_t* pid, std::vector<char*>& c_argv, std::vector<char*>& c_env, int stdin_fd,
              int stdout_fd, int stderr_fd, int parent_death_signal) {
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
      ::execvpe(c_argv[0], c_argv.data(), c_env.data());
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

// posix_spawnp with the launcher's settings (see child_process.h).
int spawn(pid_t* pid, std::vector<char*>& c_argv, std::vector<char*>& c_env, int stdin_fd,
          int stdout_fd, int stderr_fd) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (stdin_fd >= 0) {
    posix_spawn_file_actions_adddup2(&actions, stdin_fd, STDIN_FILENO);
  } else {
    posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  }
  posix_spawn_file_actions_adddup2(&actions, stdout_fd, STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, stderr_fd, STDERR_FILENO);
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
  const int error = ::posix_spawnp(pid, c_argv[0], &actions, &attr, c_argv.data(), c_env.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  return error;
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

  const int stdin_fd = stdin_pipe ? in_r.get() : -1;
  child.error = parent_death_signal != 0
                    ? fork_exec(&child.pid, c_argv, c_env, stdin_fd, out_w.get(), err_w.get(),
                                parent_death_signal)
                    : spawn(&child.pid, c_argv, c_env, stdin_fd, out_w.get(), err_w.get());
  if (child.error != 0) return child;
  child.stdin_w = std::move(in_w);
  child.stdout_r = std::move(out_r);
  child.stderr_r = std::move(err_r);
  return child;
}

}  // namespace hvd::launcher
