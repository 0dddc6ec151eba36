// Signals as events: a set of signals blocked in the calling thread and read from a signalfd,
// for a poll() loop (the launcher's, the agent's). RAII: the destructor restores the thread's
// previous mask, also when an exception unwinds, so a throw between block and restore cannot
// leave SIGINT blocked.
#pragma once

#include <signal.h>

#include <initializer_list>
#include <optional>

#include "common/unique_fd.h"

namespace hvd {

class SignalFd {
 public:
  // Blocks `signals` in this thread and opens a non-blocking, close-on-exec signalfd for them.
  // Throws hvd::Error if the kernel refuses.
  explicit SignalFd(std::initializer_list<int> signals);
  ~SignalFd();
  SignalFd(const SignalFd&) = delete;
  SignalFd& operator=(const SignalFd&) = delete;

  int fd() const { return fd_.get(); }  // poll it for POLLIN
  // The next pending signal, or nullopt when none is pending. Never blocks.
  std::optional<int> next();

 private:
  sigset_t old_mask_;
  UniqueFd fd_;
};

// Blocks SIGPIPE in this thread for its lifetime and discards one that a write in that time
// raised: for code that writes to sockets through a library that sends without MSG_NOSIGNAL
// (Debian's cpp-httplib is a compiled library whose send() passes no flags). A peer that reset
// the connection is then an EPIPE the library reports, not a signal whose default kills the
// process (a training program, in libhvd's case). A SIGPIPE already pending is left alone.
// On a thread that called block_sigpipe_for_this_thread() it costs nothing (no system call):
// libhvd's engine thread runs every collective inside one.
class ScopedSigpipeBlock {
 public:
  ScopedSigpipeBlock();
  ~ScopedSigpipeBlock();
  ScopedSigpipeBlock(const ScopedSigpipeBlock&) = delete;
  ScopedSigpipeBlock& operator=(const ScopedSigpipeBlock&) = delete;

 private:
  sigset_t old_mask_;
  bool was_pending_ = false;
  bool active_ = false;  // false: the thread blocks SIGPIPE for good, nothing to undo
};

// Blocks SIGPIPE for the rest of this thread's life: for threads a library owns and that only
// talk to sockets (a SIGPIPE raised on them stays pending, never delivered).
void block_sigpipe_for_this_thread();

}  // namespace hvd
