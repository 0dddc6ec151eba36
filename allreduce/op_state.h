// One submitted op on this rank, shared by its hvd::Handle and the engine.
//
// The caller's thread fills it and submits it; the engine's background thread runs it and calls
// finish() exactly once; Handle::wait() blocks on it. Tensors are views: the caller keeps their
// memory alive until the op finished (hvd.hpp says so).
#pragma once

#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>

#include "allreduce/messages.h"
#include "hvd/hvd.hpp"

namespace hvd::runtime {

// Wakes the background thread: an eventfd it polls, plus a flag asking it to send what it has
// batched now rather than after the cycle time (someone is waiting on a handle).
class Wakeup {
 public:
  Wakeup() : fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}
  Wakeup(const Wakeup&) = delete;
  Wakeup& operator=(const Wakeup&) = delete;
  ~Wakeup() { ::close(fd_); }
  int fd() const { return fd_; }
  void notify() {
    const std::uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(fd_, &one, sizeof one);
  }
  void flush() {
    flush_.store(true);
    notify();
  }
  bool take_flush() { return flush_.exchange(false); }
  void drain() {
    std::uint64_t n;
    [[maybe_unused]] auto r = ::read(fd_, &n, sizeof n);
  }

 private:
  int fd_;
  std::atomic<bool> flush_{false};
};

}  // namespace hvd::runtime

namespace hvd::detail {

struct OpState {
  runtime::Request request;
  Tensor in;
  Tensor out;
  AllreduceOptions options;
  Allocator allocate;                // allgather/reducescatter/alltoall output
  std::vector<std::int64_t> splits;  // alltoall
  Buffer buffer;                     // the output of the Buffer-returning forms
  bool output_in_buffer = false;     // `allocate` fills `buffer` (host memory)
  std::vector<std::int64_t> received_splits;
  std::shared_ptr<runtime::Wakeup> wakeup;

  std::mutex mutex;
  std::condition_variable cv;
  bool done = false;
  std::exception_ptr error;

  // Records the outcome (once); the caller notifies `cv`.
  void mark_done(std::exception_ptr e) {
    std::lock_guard<std::mutex> lock(mutex);
    if (done) return;
    error = std::move(e);
    done = true;
  }
  void finish(std::exception_ptr e) {
    mark_done(std::move(e));
    cv.notify_all();
  }
};

}  // namespace hvd::detail
