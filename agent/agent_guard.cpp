#include "agent/agent_guard.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <thread>

#include "agent/agent_host.h"

namespace hvd::agent {
namespace {

volatile sig_atomic_t agent_pid = 0;

void forward_to_agent(int sig) {
  const pid_t pid = agent_pid;
  if (pid > 0) ::kill(pid, sig);
}

// Only /dev/null on 0, 1 and 2, nothing else: the guard must not keep the agent's channel
// (its SSH session's pipes, a launcher's pipes or TCP connection) open after the agent ends.
void drop_descriptors() {
  if (::close_range(3, ~0U, 0) != 0) {
    const long max = std::min(::sysconf(_SC_OPEN_MAX), 65536L);
    for (int fd = 3; fd < max; ++fd) ::close(fd);
  }
  const int null = ::open("/dev/null", O_RDWR);
  if (null < 0) {  // no /dev/null: close them, the agent's copies are what matter
    for (int fd = 0; fd <= 2; ++fd) ::close(fd);
    return;
  }
  for (int fd = 0; fd <= 2; ++fd) {
    if (fd != null) ::dup2(null, fd);
  }
  if (null > 2) ::close(null);
}

// Kills and reaps every child of the guard (what re-parented to it after the agent ended) until
// none is left. A killed child's own children re-parent to the guard in turn: the next round
// finds them. A process in uninterruptible sleep dies of its SIGKILL when it wakes; the guard
// gives up waiting for it after a while rather than keep its host's session open.
void kill_leftovers() {
  using Clock = std::chrono::steady_clock;
  constexpr auto kPatience = std::chrono::seconds(10);
  auto last_progress = Clock::now();
  while (true) {
    bool progress = false;
    for (const pid_t pid : stray_children({})) {
      ::kill(-pid, SIGKILL);  // its process group, if it leads one (a rank, a setsid daemon)
      ::kill(pid, SIGKILL);
      progress = true;
    }
    int status = 0;
    pid_t reaped = 0;
    while ((reaped = ::waitpid(-1, &status, WNOHANG)) > 0) progress = true;
    if (reaped < 0 && errno == ECHILD) return;  // no child at all, zombies included
    if (progress) last_progress = Clock::now();
    if (Clock::now() - last_progress > kPatience) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

// Ends the guard as the agent ended: its exit code, or death by its signal (without a core
// dump: the agent's, if any, was written).
[[noreturn]] void end_like(int status) {
  if (WIFEXITED(status)) ::_exit(WEXITSTATUS(status));
  if (!WIFSIGNALED(status)) ::_exit(70);
  const int sig = WTERMSIG(status);
  const rlimit no_core{0, 0};
  ::setrlimit(RLIMIT_CORE, &no_core);
  ::signal(sig, SIG_DFL);
  sigset_t only;
  ::sigemptyset(&only);
  ::sigaddset(&only, sig);
  ::sigprocmask(SIG_UNBLOCK, &only, nullptr);
  ::raise(sig);
  ::_exit(128 + sig);  // a signal that does not end a process by default
}

[[noreturn]] void guard(pid_t agent, const sigset_t& mask) {
  ::prctl(PR_SET_NAME, "hvdrun-guard");
  agent_pid = agent;
  struct sigaction forward {};
  forward.sa_handler = forward_to_agent;
  ::sigemptyset(&forward.sa_mask);
  forward.sa_flags = SA_RESTART;
  for (const int sig : {SIGTERM, SIGINT, SIGHUP}) ::sigaction(sig, &forward, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  ::sigprocmask(SIG_SETMASK, &mask, nullptr);
  drop_descriptors();
  // The guard is the last to go: where the OOM killer may be told so (root), it spares it.
  if (const int fd = ::open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC); fd >= 0) {
    [[maybe_unused]] const ssize_t n = ::write(fd, "-1000", 5);
    ::close(fd);
  }
  int status = 0;
  while (::waitpid(agent, &status, 0) < 0) {
    if (errno != EINTR) ::_exit(70);
  }
  agent_pid = 0;
  kill_leftovers();
  end_like(status);
}

}  // namespace

int run_guarded(int (*agent)()) {
  // Set before the fork, so that no descendant can re-parent past the guard in between; the
  // child does not inherit it (the agent makes itself a subreaper of its own). The stop signals
  // wait until the guard forwards them.
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  sigset_t stops, before;
  ::sigemptyset(&stops);
  for (const int sig : {SIGTERM, SIGINT, SIGHUP}) ::sigaddset(&stops, sig);
  ::sigprocmask(SIG_BLOCK, &stops, &before);
  const pid_t pid = ::fork();
  if (pid > 0) guard(pid, before);
  ::sigprocmask(SIG_SETMASK, &before, nullptr);
  if (pid < 0) ::prctl(PR_SET_CHILD_SUBREAPER, 0);
  return agent();
}

}  // namespace hvd::agent
