#include "common/process.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <climits>
#include <cstring>
#include <utility>

extern char** environ;

namespace hvd {
namespace {

// The soft descriptor limit children get back after raise_descriptor_limit(); rlim_cur 0: unset.
// Written once before threads start, read in the child after fork (a plain load).
struct rlimit g_child_nofile {};

struct ChildFailure {
  Process::Stage stage;
  int error;
};

// In the child, after fork: only async-signal-safe calls, then exec or _exit.
[[noreturn]] void child_fail(int fd, Process::Stage stage) {
  const ChildFailure failure{stage, errno};
  (void)!::write(fd, &failure, sizeof failure);
  ::_exit(127);
}

std::vector<char*> c_strings(const std::vector<std::string>& in) {
  std::vector<char*> out;
  out.reserve(in.size() + 1);
  for (const std::string& s : in) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

bool make_pipe(UniqueFd& read_end, UniqueFd& write_end) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return false;
  read_end.reset(fds[0]);  // owned at once: a later failure closes both
  write_end.reset(fds[1]);
  return true;
}

// What the child of spawn() needs, prepared before fork: it must not allocate.
struct ChildSetup {
  const ProcessSpec* spec;
  char** argv;
  char** env;
  char** sh_argv;   // {"/bin/sh", <the file found>, argv[1..], nullptr}: see exec_on_path
  const char* cwd;  // or nullptr
  pid_t parent;
  int in_r;  // or -1: /dev/null
  int out_w;
  int err_w;
  int status_w;
};

// execvp's search, on the child's own PATH (the one in `env`), in the child after vfork: execvp
// would read `environ`, and setting that there would change the parent's. As glibc's execvp:
// each entry of PATH ("/bin:/usr/bin" without one; an empty entry is the working directory) and
// the name, exec'd in turn; not there, not a directory or not permitted: the next; a file in no
// executable format runs under /bin/sh. Returns with errno set when nothing ran (EACCES when a
// file was found but could not run, else ENOENT). No allocation: a stack buffer per candidate.
void exec_on_path(const ChildSetup& c) {
  const char* path = "/bin:/usr/bin";
  for (char** e = c.env; *e != nullptr; ++e) {
    if (std::strncmp(*e, "PATH=", 5) == 0) {
      path = *e + 5;
      break;
    }
  }
  const char* name = c.argv[0];
  const std::size_t name_len = std::strlen(name);
  if (name_len == 0) {
    errno = ENOENT;
    return;
  }
  bool denied = false;
  char file[PATH_MAX];
  for (const char* dir = path;;) {
    const char* end = ::strchrnul(dir, ':');
    const std::size_t dir_len = static_cast<std::size_t>(end - dir);
    if (dir_len + 1 + name_len < sizeof file) {
      std::size_t n = 0;
      if (dir_len > 0) {
        std::memcpy(file, dir, dir_len);
        n = dir_len;
        file[n++] = '/';
      }
      std::memcpy(file + n, name, name_len + 1);
      ::execve(file, c.argv, c.env);
      if (errno == ENOEXEC) {
        c.sh_argv[1] = file;
        ::execve("/bin/sh", c.sh_argv, c.env);
        errno = ENOEXEC;
      }
      switch (errno) {
        case EACCES:
          denied = true;
          break;
        case ENOENT:
        case ENOTDIR:
        case ESTALE:
        case ENODEV:
        case ETIMEDOUT:
          break;
        default:
          return;  // found, and it cannot run: its own error
      }
    }
    if (*end == '\0') break;
    dir = end + 1;
  }
  errno = denied ? EACCES : ENOENT;
}

// The child's side of spawn(), after vfork: only async-signal-safe calls, and no write to the
// parent's memory (the child runs on it until it execs) but spawn()'s own scratch `sh_argv`,
// which the parent does not read again; then exec or _exit.
[[noreturn]] void run_child(const ChildSetup& c) {
  const ProcessSpec& spec = *c.spec;
  ::setpgid(0, 0);
  if (spec.parent_death_signal != 0) {
    ::prctl(PR_SET_PDEATHSIG, spec.parent_death_signal);
    if (::getppid() != c.parent) child_fail(c.status_w, Process::Stage::kParentGone);
  }
  // Caught signals back to their defaults before the mask opens (after vfork a handler would
  // run on the parent's memory), SIGPIPE and SIGINT too (the launcher ignores them).
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) {
    struct sigaction old {};
    if (::sigaction(sig, nullptr, &old) != 0) continue;
    if (sig == SIGPIPE || sig == SIGINT ||
        (old.sa_handler != SIG_DFL && old.sa_handler != SIG_IGN)) {
      ::sigaction(sig, &dfl, nullptr);
    }
  }
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  if (g_child_nofile.rlim_cur != 0) ::setrlimit(RLIMIT_NOFILE, &g_child_nofile);
  if (c.in_r >= 0) {
    ::dup2(c.in_r, STDIN_FILENO);
  } else {
    const int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (null_fd >= 0) ::dup2(null_fd, STDIN_FILENO);  // dup2's copy is not close-on-exec
  }
  ::dup2(c.out_w, STDOUT_FILENO);
  ::dup2(c.err_w, STDERR_FILENO);
  int status_fd = c.status_w;
  // Each `from` first to a number above every `to` (a `from` may be another pair's `to`), then
  // onto its `to`; the exec-status pipe out of the way of every `to` too.
  int highest = 2;
  for (const auto& [from, to] : spec.pass_fds) highest = std::max({highest, to, from});
  if (!spec.pass_fds.empty() && status_fd <= highest) {
    status_fd = ::fcntl(status_fd, F_DUPFD_CLOEXEC, highest + 1);
    highest = std::max(highest, status_fd);
  }
  std::array<int, 8> moved{};  // hvdrun passes three at most
  const size_t passed = std::min(spec.pass_fds.size(), moved.size());
  for (size_t i = 0; i < passed; ++i) {
    moved[i] = ::fcntl(spec.pass_fds[i].first, F_DUPFD_CLOEXEC, highest + 1);
  }
  for (size_t i = 0; i < passed; ++i) {
    ::dup2(moved[i], spec.pass_fds[i].second);  // the copy is not close-on-exec
  }
  if (c.cwd != nullptr && ::chdir(c.cwd) != 0) child_fail(status_fd, Process::Stage::kChdir);
  if (spec.lookup_in_our_path || std::strchr(c.argv[0], '/') != nullptr) {
    ::execvpe(c.argv[0], c.argv, c.env);  // searches our PATH (none with a '/')
  } else {
    exec_on_path(c);  // the child's own PATH
  }
  child_fail(status_fd, Process::Stage::kExec);
}

}  // namespace

unsigned long raise_descriptor_limit() {
  struct rlimit limit {};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return 0;
  if (limit.rlim_cur < limit.rlim_max) {
    const struct rlimit original = limit;
    limit.rlim_cur = limit.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &limit) == 0) {
      if (g_child_nofile.rlim_cur == 0) g_child_nofile = original;
    } else {
      limit.rlim_cur = original.rlim_cur;
    }
  }
  return limit.rlim_cur;
}

ExitStatus ExitStatus::from_wait_status(int status) {
  if (WIFSIGNALED(status)) return {true, WTERMSIG(status)};
  return {false, WEXITSTATUS(status)};
}

Process Process::spawn(const ProcessSpec& spec) {
  Process p;
  p.argv0_ = spec.argv.empty() ? std::string() : spec.argv.front();
  p.cwd_ = spec.cwd.value_or("");
  UniqueFd in_r, in_w, out_r, out_w, err_r, err_w, status_r, status_w;
  if ((spec.stdin_pipe && !make_pipe(in_r, in_w)) || !make_pipe(out_r, out_w) ||
      !make_pipe(err_r, err_w) || !make_pipe(status_r, status_w)) {
    p.stage_ = Stage::kPipe;
    p.errno_ = errno;
    return p;
  }
  if (spec.argv.empty()) {
    p.stage_ = Stage::kExec;
    p.errno_ = ENOENT;
    return p;
  }
  // Everything the child needs is prepared before fork: it must not allocate.
  std::vector<char*> c_argv = c_strings(spec.argv);
  std::vector<char*> c_env = c_strings(spec.env);
  std::vector<char*> sh_argv{const_cast<char*>("/bin/sh"), nullptr};
  sh_argv.insert(sh_argv.end(), c_argv.begin() + 1, c_argv.end());
  const char* cwd = spec.cwd ? spec.cwd->c_str() : nullptr;
  const pid_t parent = ::getpid();

  // vfork: the child writes nothing of the parent's that the parent reads again (it runs on the
  // parent's memory until it execs): no copy of the page tables, no copy-on-write faults in the
  // parent afterwards, which cost milliseconds per child in a launcher holding a big host list
  // (issue 51 finding 5: a discovery script runs every few seconds), and the child runs at once on
  // the parent's CPU while the parent waits, where a forked child waits for a CPU of its own: an
  // agent's ranks start sooner on a busy node (issue 51 finding 1: 7 ms of an srun launch of 3
  // ranks on two cores). Signals stay blocked across it, so that no handler of ours runs in the
  // child before run_child() has put them back to their defaults.
  const ChildSetup setup{&spec,  c_argv.data(), c_env.data(), sh_argv.data(), cwd,
                         parent, in_r.get(),    out_w.get(),  err_w.get(),    status_w.get()};
  sigset_t all, saved;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &saved);
  const pid_t pid = ::vfork();
  if (pid == 0) run_child(setup);
  const int fork_errno = errno;
  ::pthread_sigmask(SIG_SETMASK, &saved, nullptr);
  if (pid < 0) {
    p.stage_ = Stage::kFork;
    p.errno_ = fork_errno;
    return p;
  }
  ::setpgid(pid, pid);  // from the parent too, so a signal to the group right away cannot miss
  status_w.reset();
  in_r.reset();
  out_w.reset();
  err_w.reset();
  ChildFailure failure{};
  ssize_t n;
  do {
    n = ::read(status_r.get(), &failure, sizeof failure);
  } while (n < 0 && errno == EINTR);
  if (n == static_cast<ssize_t>(sizeof failure)) {  // chdir or exec failed: nothing runs
    ::waitpid(pid, nullptr, 0);
    p.stage_ = failure.stage;
    p.errno_ = failure.error;
    return p;
  }
  p.pid_ = pid;
  p.in_ = std::move(in_w);
  p.out_ = std::move(out_r);
  p.err_ = std::move(err_r);
  return p;
}

Process::Process(Process&& other) noexcept { *this = std::move(other); }

Process& Process::operator=(Process&& other) noexcept {
  if (this != &other) {
    if (running()) {
      signal_group(SIGKILL);
      wait();
    }
    pid_ = std::exchange(other.pid_, -1);
    in_ = std::move(other.in_);
    out_ = std::move(other.out_);
    err_ = std::move(other.err_);
    status_ = std::exchange(other.status_, std::nullopt);
    stage_ = other.stage_;
    errno_ = other.errno_;
    argv0_ = std::move(other.argv0_);
    cwd_ = std::move(other.cwd_);
  }
  return *this;
}

Process::~Process() {
  if (running()) {
    signal_group(SIGKILL);
    wait();
  }
}

std::string Process::error() const {
  const std::string why = std::strerror(errno_);
  switch (stage_) {
    case Stage::kNone:
      return {};
    case Stage::kPipe:
      return "cannot create pipes: " + why;
    case Stage::kFork:
      return "cannot fork: " + why;
    case Stage::kChdir:
      return "cannot enter the working directory '" + cwd_ + "': " + why;
    case Stage::kExec:
      return "cannot run the command '" + argv0_ + "': " + why;
    case Stage::kParentGone:
      return "its parent went away while it started";
  }
  return {};
}

bool Process::try_reap() {
  if (!started()) return false;
  if (status_) return true;
  int status = 0;
  if (::waitpid(pid_, &status, WNOHANG) == pid_) status_ = ExitStatus::from_wait_status(status);
  return status_.has_value();
}

ExitStatus Process::wait() {
  if (!started()) return {false, 127};
  while (!status_) {
    int status = 0;
    const pid_t r = ::waitpid(pid_, &status, 0);
    if (r == pid_) {
      status_ = ExitStatus::from_wait_status(status);
    } else if (r < 0 && errno != EINTR) {
      status_ = ExitStatus{false, 127};  // reaped elsewhere: nothing to wait for
    }
  }
  return *status_;
}

void Process::signal_group(int sig) const {
  if (running()) ::kill(-pid_, sig);
}

std::vector<std::string> environ_strings() {
  std::vector<std::string> env;
  for (char** p = environ; *p != nullptr; ++p) env.emplace_back(*p);
  return env;
}

std::optional<CapturedRun> run_and_capture(const ProcessSpec& spec) {
  Process p = Process::spawn(spec);
  if (!p.started()) return std::nullopt;
  CapturedRun run;
  std::array<char, 4096> buf{};
  while (p.out().valid() || p.err().valid()) {
    std::array<pollfd, 2> fds{{{p.out().valid() ? p.out().get() : -1, POLLIN, 0},
                               {p.err().valid() ? p.err().get() : -1, POLLIN, 0}}};
    if (::poll(fds.data(), fds.size(), -1) < 0 && errno != EINTR) break;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      UniqueFd& fd = i == 0 ? p.out() : p.err();
      const ssize_t n = ::read(fd.get(), buf.data(), buf.size());
      if (n > 0) {
        run.output.append(buf.data(), static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        fd.reset();
      }
    }
  }
  run.status = p.wait();
  return run;
}

}  // namespace hvd
