// One submitted op on this rank, shared by its hvd::Handle and the engine.
//
// The caller's thread fills it and submits it; the engine's background thread runs it and calls
// finish() exactly once; Handle::wait() blocks on it. Tensors are views: the caller keeps their
// memory alive until the op finished (hvd.hpp says so).
#pragma once

#include <atomic>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>

#include "allreduce/engine/messages.h"
#include "hvd/hvd.hpp"

namespace hvd::runtime {
class Runtime;
}

namespace hvd::detail {

struct OpState {
  runtime::Request request;
  Tensor in;
  Tensor out;             // only when not in place (out_is_in false): read it by output()
  bool out_is_in = true;  // the op writes its input (broadcast, in-place allreduce, ...)
  // allreduce and reducescatter: the reduce op and scale factors (Runtime::submit copies them
  // into `request`).
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
  // Set once, under `mutex` (so that a waiter on `cv` cannot miss it), after `error`: a thread
  // that reads it true without the lock (finished()) may then read `error`, which never changes
  // again. Most waits find their op already done (the rest of a fused batch): no lock for them.
  std::atomic<bool> done{false};
  std::exception_ptr error;

  const Tensor& output() const { return out_is_in ? in : out; }
  bool finished() const { return done.load(std::memory_order_acquire); }
  // Records the outcome (once); the caller notifies `cv`.
  void mark_done(std::exception_ptr e) {
    std::lock_guard<std::mutex> lock(mutex);
    if (done.load(std::memory_order_relaxed)) return;
    error = std::move(e);
    done.store(true, std::memory_order_release);
  }
  void finish(std::exception_ptr e) {
    mark_done(std::move(e));
    cv.notify_all();
  }
};

}  // namespace hvd::detail
