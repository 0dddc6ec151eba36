#include "worker/rank_process.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

extern char** environ;

namespace hvd::worker {
namespace {

struct ChildFailure {
  char stage;  // 'c' chdir, 'e' exec, 'p' parent gone
  int error;
};

[[noreturn]] void child_fail(int fd, char stage) {
  const ChildFailure failure{stage, errno};
  (void)!::write(fd, &failure, sizeof failure);
  _exit(127);
}

std::vector<char*> c_strings(const std::vector<std::string>& in) {
  std::vector<char*> out;
  out.reserve(in.size() + 1);
  for (const std::string& s : in) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

}  // namespace

SpawnedRank spawn_rank(const std::vector<std::string>& argv, const std::string& cwd,
                       const std::vector<std::string>& env) {
  SpawnedRank rank;
  int out[2], err[2], status[2];
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0 ||
      ::pipe2(status, O_CLOEXEC) != 0) {
    rank.error = fmt::format("cannot create pipes: {}", std::strerror(errno));
    return rank;
  }
  UniqueFd out_r(out[0]), out_w(out[1]), err_r(err[0]), err_w(err[1]);
  UniqueFd status_r(status[0]), status_w(status[1]);
  std::vector<char*> c_argv = c_strings(argv);
  std::vector<char*> c_env = c_strings(env);
  const pid_t parent = ::getpid();

  const pid_t pid = ::fork();
  if (pid < 0) {
    rank.error = fmt::format("fork failed: {}", std::strerror(errno));
    return rank;
  }
  if (pid == 0) {
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) child_fail(status_w.get(), 'p');
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::signal(SIGPIPE, SIG_DFL);
    const int null_fd = ::open("/dev/null", O_RDONLY);
    ::dup2(null_fd, STDIN_FILENO);
    ::dup2(out_w.get(), STDOUT_FILENO);
    ::dup2(err_w.get(), STDERR_FILENO);
    if (::chdir(cwd.c_str()) != 0) child_fail(status_w.get(), 'c');
    environ = c_env.data();  // execvp searches the rank's own PATH
    ::execvp(c_argv[0], c_argv.data());
    child_fail(status_w.get(), 'e');
  }
  ::setpgid(pid, pid);  // also from the parent, so a kill(-pid) right away cannot miss
  status_w.reset();
  out_w.reset();
  err_w.reset();
  ChildFailure failure{};
  const ssize_t n = ::read(status_r.get(), &failure, sizeof failure);
  if (n == sizeof failure) {
    ::waitpid(pid, nullptr, 0);
    const char* what = failure.stage == 'c'   ? "cannot enter the working directory"
                       : failure.stage == 'e' ? "cannot run the command"
                                              : "the agent went away";
    rank.error = fmt::format("{} '{}': {}", what, failure.stage == 'c' ? cwd : argv.front(),
                             std::strerror(failure.error));
    return rank;
  }
  rank.pid = pid;
  rank.out = std::move(out_r);
  rank.err = std::move(err_r);
  return rank;
}

}  // namespace hvd::worker
