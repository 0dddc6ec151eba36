#include "common/signal_fd.h"

#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "common/error.h"

namespace hvd {

SignalFd::SignalFd(std::initializer_list<int> signals) {
  sigset_t mask;
  sigemptyset(&mask);
  for (int s : signals) sigaddset(&mask, s);
  ::pthread_sigmask(SIG_BLOCK, &mask, &old_mask_);
  fd_.reset(::signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC));
  if (!fd_.valid()) {
    const int e = errno;
    ::pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
    throw Error(std::string("cannot create a signalfd: ") + std::strerror(e));
  }
}

SignalFd::~SignalFd() {
  fd_.reset();
  ::pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
}

std::optional<int> SignalFd::next() {
  signalfd_siginfo info{};
  ssize_t n;
  do {
    n = ::read(fd_.get(), &info, sizeof info);
  } while (n < 0 && errno == EINTR);
  if (n != static_cast<ssize_t>(sizeof info)) return std::nullopt;
  return static_cast<int>(info.ssi_signo);
}

namespace {
thread_local bool sigpipe_blocked_for_good = false;
}  // namespace

void block_sigpipe_for_this_thread() {
  sigset_t pipe;
  sigemptyset(&pipe);
  sigaddset(&pipe, SIGPIPE);
  ::pthread_sigmask(SIG_BLOCK, &pipe, nullptr);
  sigpipe_blocked_for_good = true;
}

ScopedSigpipeBlock::ScopedSigpipeBlock() {
  if (sigpipe_blocked_for_good) return;
  active_ = true;
  sigset_t pending;
  sigemptyset(&pending);
  ::sigpending(&pending);
  was_pending_ = sigismember(&pending, SIGPIPE) == 1;
  sigset_t pipe;
  sigemptyset(&pipe);
  sigaddset(&pipe, SIGPIPE);
  ::pthread_sigmask(SIG_BLOCK, &pipe, &old_mask_);
}

ScopedSigpipeBlock::~ScopedSigpipeBlock() {
  if (!active_) return;
  if (!was_pending_ && sigismember(&old_mask_, SIGPIPE) == 0) {
    sigset_t pipe;
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    const timespec now{0, 0};
    while (::sigtimedwait(&pipe, nullptr, &now) == SIGPIPE) {
    }
  }
  ::pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
}

}  // namespace hvd
