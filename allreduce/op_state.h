// One submitted op on this rank, shared by its hvd::Handle and the engine.
//
// The caller's thread fills it and submits it; the engine's background thread runs it and calls
// finish() exactly once; Handle::wait() blocks on it. Tensors are views: the caller keeps their
// memory alive until the op finished (hvd.hpp says so).
#pragma once

#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>

#include "allreduce/messages.h"
#include "hvd/hvd.hpp"

namespace hvd::runtime {

// Wakes the background thread. Two descriptors it polls: an eventfd for "look now" (a waiter
// wants the batch sent, shutdown) and a timerfd for the end of the batching delay, armed by the
// submitting thread at the first submission of a batch. So the thread wakes once per batch: when
// the batch is due (a waiter or the cycle time), not at its first submission as well.
class Wakeup {
 public:
  Wakeup()
      : fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)),
        timer_(::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC)) {}
  Wakeup(const Wakeup&) = delete;
  Wakeup& operator=(const Wakeup&) = delete;
  ~Wakeup() {
    ::close(fd_);
    ::close(timer_);
  }
  int fd() const { return fd_; }
  int timer_fd() const { return timer_; }
  bool ok() const { return fd_ >= 0 && timer_ >= 0; }
  void notify() {
    const std::uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(fd_, &one, sizeof one);
  }
  // Asks for the batch to go out now; one wake-up however many threads ask before it does.
  void flush() {
    if (!flush_.exchange(true)) notify();
  }
  bool take_flush() { return flush_.exchange(false); }
  void drain() {
    std::uint64_t n;
    [[maybe_unused]] auto r = ::read(fd_, &n, sizeof n);
  }
  // The batching delay: the timer fires `delay` from now (0: disarmed).
  void arm(std::chrono::nanoseconds delay) {
    itimerspec spec{};
    spec.it_value.tv_sec = static_cast<time_t>(delay.count() / 1000000000);
    spec.it_value.tv_nsec = static_cast<long>(delay.count() % 1000000000);
    ::timerfd_settime(timer_, 0, &spec, nullptr);
  }
  void disarm() { arm(std::chrono::nanoseconds(0)); }
  void drain_timer() {
    std::uint64_t n;
    [[maybe_unused]] auto r = ::read(timer_, &n, sizeof n);
  }

 private:
  int fd_;
  int timer_;
  std::atomic<bool> flush_{false};
};

}  // namespace hvd::runtime

namespace hvd::runtime {
class Runtime;
}

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
  // The runtime it was submitted to: a waiter asks it to send the batch now (Runtime::flush).
  std::weak_ptr<runtime::Runtime> runtime;

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
