#include "allreduce/engine/engine.h"

#include <poll.h>
#include <pthread.h>

#include <fmt/format.h>

#include "allreduce/api/boundary.h"
#include "allreduce/api/log.h"
#include "allreduce/api/status_error.h"
#include "allreduce/engine/timeline.h"
#include "allreduce/runtime/runtime.h"
#include "common/signal_fd.h"
#include "contract/report.h"

namespace hvd::runtime {
namespace {

constexpr const char* kCoordinatorGone =
    "rank 0 (the coordinator) is gone: its control connection closed (it exited, crashed, was "
    "killed or called hvd::shutdown())";

}  // namespace

bool BatchDelay::add() {
  if (delay_.count() == 0) return true;
  if (!armed_) {
    armed_ = true;
    backstop_ = streak_ >= kStreak && delay_ < backstop_delay_;
    due_ = false;
    since_ = Clock::now();
    // A backstop still pending from an earlier batch fires before this one's would: keep it.
    if (!backstop_ || !fires_ || *fires_ <= since_) {
      arm(since_, backstop_ ? backstop_delay_ : delay_);
    }
    return false;
  }
  if (!backstop_ || due_) return false;
  due_ = Clock::now() - since_ >= delay_;  // once: the engine's thread takes the batch
  return due_;
}

void BatchDelay::taken(bool waiter) {
  if (!armed_) return;
  armed_ = false;
  const bool prompt = waiter && Clock::now() - since_ < delay_;
  streak_ = prompt ? std::min(streak_ + 1, kStreak) : 0;
  // A short timer would wake the thread for nothing and reprogram the clock: off. The backstop
  // runs on for the next batches (fired() finds nothing queued if none comes).
  if (!backstop_ && fires_) {
    wakeup_.disarm();
    fires_.reset();
  }
}

bool BatchDelay::fired() {
  fires_.reset();
  if (!armed_ || due_) return false;  // nothing queued, or already due
  const auto now = Clock::now();
  const auto limit = backstop_ ? backstop_delay_ : delay_;
  if (now - since_ >= delay_) return true;
  // An earlier batch's backstop, or an early tick: wait out this batch's own.
  arm(now, std::chrono::duration_cast<std::chrono::microseconds>(since_ + limit - now) +
               std::chrono::microseconds(1));
  return false;
}

void BatchDelay::arm(Clock::time_point now, std::chrono::microseconds delay) {
  wakeup_.arm(delay);
  fires_ = now + delay;
}

Engine::Engine(OpRunner& runner, ControlPlane control, EngineOptions options)
    : runner_(runner), control_(std::move(control)), options_(options) {
  if (!wakeup_.ok()) {
    throw StatusError(
        HVD_ERR_INTERNAL,
        fmt::format("cannot create the engine's eventfd/timerfd: {}", std::strerror(errno)));
  }
  if (options_.rank == 0) controller_.emplace(options_.controller);
  thread_ = std::thread([this] {
    // The backends write to sockets from here (Gloo with writev(), which raises SIGPIPE on a dead
    // peer): SIGPIPE blocked once for this thread makes each call's ScopedSigpipeBlock free.
    block_sigpipe_for_this_thread();
    ::pthread_setname_np(::pthread_self(), contract::kEngineThreadName);  // for the agent
    // Nothing may escape the thread (std::terminate would end the training program): whatever
    // goes wrong here fails the pending ops with what happened.
    try {
      while (run_once()) {
      }
    } catch (const std::exception& e) {
      fail_everything(fmt::format("the engine's thread failed: {}", e.what()));
    } catch (...) {
      fail_everything("the engine's thread failed");
    }
  });
}

Engine::~Engine() { shutdown(); }

void Engine::submit_group(std::span<const std::shared_ptr<detail::OpState>> ops, bool now) {
  if (ops.empty()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const Request& first = ops.front()->request;
    if (!failed_.empty()) {
      throw StatusError(failed_status_, fmt::format("{} '{}' cannot run: {}",
                                                    op_kind_name(first.kind), first.name, failed_));
    }
    if (stopping_) {
      throw StatusError(HVD_ERR_NOT_INITIALIZED, "libhvd is shutting down");
    }
    for (std::size_t i = 0; i < ops.size(); ++i) {
      if (!in_flight_.insert(ops[i]->request.name).second) {
        for (std::size_t k = 0; k < i; ++k) in_flight_.erase(ops[k]->request.name);
        throw StatusError(HVD_ERR_INVALID_ARGUMENT,
                          fmt::format("a tensor named '{}' is already in flight on this rank",
                                      ops[i]->request.name),
                          "wait for the earlier op of that name, or give this one another name");
      }
    }
    queue_.insert(queue_.end(), ops.begin(), ops.end());
    // The first submission of a batch starts the batching delay; the thread sleeps on.
    if (!now) now = batch_.add();
  }
  if (now) flush();
}

void Engine::flush() {
  if (controller_) {
    wakeup_.flush();  // rank 0's batches go to its Controller, which the thread owns
    return;
  }
  try {
    send_to_coordinator(false, true);
  } catch (...) {
    wakeup_.flush();  // cannot happen short of bad_alloc; let the thread try
  }
}

void Engine::shutdown() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wakeup_.notify();
  if (thread_.joinable()) thread_.join();
}

bool Engine::run_once() {
  // Sleep until a flush, the end of the batching delay, a message or a stall check.
  std::vector<pollfd> fds{{wakeup_.fd(), POLLIN, 0}, {wakeup_.timer_fd(), POLLIN, 0}};
  std::vector<int> ranks{-1, -1};
  control_.watch(fds, ranks);
  std::optional<Clock::time_point> wake_at;
  if (controller_) wake_at = controller_->next_stall_check();
  const std::optional<Clock::time_point> liveness = liveness_due(Clock::now());
  if (liveness && (!wake_at || *liveness < *wake_at)) wake_at = liveness;
  if (!poll_until(fds, wake_at)) {
    fail_everything(fmt::format("the engine's poll() failed: {}", std::strerror(errno)));
    return false;
  }
  const auto now = Clock::now();

  if (fds[0].revents != 0) wakeup_.drain();
  const bool timer = fds[1].revents != 0;
  if (timer) wakeup_.drain_timer();
  // The flag before the queue: a submission flushed before we read the flag is in the queue.
  const bool flush = wakeup_.take_flush();
  bool stopping, due;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping = stopping_;
    due = timer && batch_.fired();
  }
  if (flush || due || stopping) send_batch(now, false, flush && !due);

  std::vector<int> readable;
  for (std::size_t i = 2; i < fds.size(); ++i) {
    if (fds[i].revents != 0) readable.push_back(ranks[i]);
  }
  if (!read_network(readable, now)) return false;
  if (controller_) coordinate(now);
  // Only when due (about once a second): not a lock more on every turn of a busy loop.
  if (liveness && now >= *liveness && !check_coordinator(now)) return false;

  if (stopping && !stopped_) {
    send_batch(now, true, false);
    if (controller_) coordinate(now);
    stopped_ = true;
    fail_everything("hvd::shutdown() was called while it was pending");
  }
  return !stopped_;
}

EngineStats Engine::stats() const {
  EngineStats s;
  s.negotiated = negotiated_.load();
  s.eager = eager_.load();
  s.responses = responses_.load();
  return s;
}

RequestList Engine::take_queue(bool waiter, std::string& data) {
  // Everything queued goes out, and the next submission starts a new batching delay.
  RequestList batch;
  std::lock_guard<std::mutex> lock(mutex_);
  negotiated_ += queue_.size();
  // Copied under the lock: once the op is pending, a failure (fail_everything) may finish it and
  // its caller free the buffer.
  if (queue_.size() == 1) data.assign(runner_.eager_input(*queue_.front()));
  batch.requests.reserve(queue_.size());
  for (auto& op : queue_) {
    batch.requests.push_back(op->request);
    pending_[op->request.name] = std::move(op);
  }
  queue_.clear();
  batch_.taken(waiter);
  return batch;
}

bool Engine::send_to_coordinator(bool shutdown, bool waiter) {
  // One sender at a time, so batches leave in the order they were taken and none follows the
  // shutdown message; the background thread closes the connection under the same lock.
  std::lock_guard<std::mutex> lock(send_mutex_);
  std::string data;
  RequestList batch = take_queue(waiter, data);
  batch.shutdown = shutdown;
  if (batch.requests.empty() && !shutdown) return true;
  std::string bytes = encode(batch);
  frame_contribution(bytes, data);
  return control_.send(0, bytes);
}

void Engine::send_batch(Clock::time_point now, bool shutdown, bool waiter) {
  if (!controller_) {
    if (!send_to_coordinator(shutdown, waiter) && !shutdown)
      fail_everything(kCoordinatorGone, HVD_ERR_PEER_LOST);
    return;
  }
  std::string data;
  RequestList batch = take_queue(waiter, data);
  batch.shutdown = shutdown;
  if (batch.requests.empty() && !shutdown) return;
  if (options_.timeline != nullptr) {
    for (const Request& q : batch.requests) options_.timeline->negotiating(q, 0);
  }
  note_eager(0, batch, std::move(data));
  controller_->add(0, std::move(batch), now);
}

bool Engine::read_network(const std::vector<int>& readable, Clock::time_point now) {
  for (int r : readable) {
    auto messages = control_.receive(r);
    if (!messages) {
      {
        std::lock_guard<std::mutex> lock(send_mutex_);  // a waiter may be sending on it
        control_.close(r);
      }
      if (controller_) {
        controller_->rank_left(r);
        continue;
      }
      fail_everything(kCoordinatorGone, HVD_ERR_PEER_LOST);
      return false;
    }
    for (const std::string& m : *messages) {
      // Every message: a request or response list, then the data of an eager allreduce, if one
      // (frame_contribution).
      std::optional<FramedContribution> framed =
          decode_or_fail(r, [&] { return unframe_contribution(m); });
      if (!framed) return false;
      if (controller_) {
        std::optional<RequestList> list =
            decode_or_fail(r, [&] { return decode_requests(framed->head); });
        if (!list) return false;
        if (options_.timeline != nullptr) {
          for (const Request& q : list->requests) options_.timeline->negotiating(q, r);
        }
        note_eager(r, *list, std::string(framed->data));
        controller_->add(r, std::move(*list), now);
      } else {
        std::optional<ResponseList> list = decode_or_fail(r, [&] {
          ResponseList responses = decode_responses(framed->head);
          if (!framed->data.empty() &&
              (responses.responses.size() != 1 || responses.responses.front().names.size() != 1)) {
            throw StatusError(HVD_ERR_INTERNAL,
                              "an allreduce's result came with other than one response of one op");
          }
          return responses;
        });
        if (!list) return false;
        if (!framed->data.empty()) {
          finish_eager(*list, framed->data);
          last_heard_ = Clock::now();
          continue;
        }
        execute(*list);
        // A keepalive (an empty list) or responses: rank 0 is there. Counted after the work, which
        // may take long (a big collective) and occupies rank 0 just as long.
        last_heard_ = Clock::now();
      }
    }
  }
  return true;
}

template <typename Decode>
auto Engine::decode_or_fail(int from, Decode&& decode) -> std::optional<decltype(decode())> {
  try {
    return decode();
  } catch (const std::exception& e) {
    // Only ranks of this job reach the control plane (its token), so this is another libhvd
    // version or a corrupted peer: stop, failing every pending op with who sent what.
    fail_everything(fmt::format(
        "rank {} sent a message this rank cannot read on the engine's control plane ({}); do all "
        "ranks run the same libhvd version?",
        from, e.what()));
    std::lock_guard<std::mutex> lock(send_mutex_);
    for (int r = 0; r < options_.size; ++r) {
      if (r != options_.rank) control_.close(r);  // the peers see this rank gone
    }
    return std::nullopt;
  }
}

void Engine::coordinate(Clock::time_point now) {
  for (const std::string& warning : controller_->check_stalls(now)) logger().warn("{}", warning);
  ResponseList list = controller_->take();
  if (list.responses.empty() && list.fatal.empty()) {
    // Ranks wait on tensors others have not submitted: tell them the coordinator is alive.
    if (controller_->waiting() && now - last_sent_ >= kCoordinatorKeepalive) {
      std::string keepalive = encode(ResponseList{});
      frame_contribution(keepalive, {});
      for (int r = 1; r < options_.size; ++r) control_.send(r, keepalive);
      last_sent_ = now;
    }
    return;
  }
  last_sent_ = now;
  if (options_.timeline != nullptr) {
    options_.timeline->cycle_start();  // the TCP engine's cycle: a round of decisions
    for (const Response& r : list.responses) options_.timeline->negotiated(r);
  }
  // One allreduce decided alone whose inputs every rank brought: reduced here, the result sent
  // with the response, and no collective.
  std::string result;
  if (list.responses.size() == 1 && list.fatal.empty()) result = reduce_eager(list.responses[0]);
  if (!list.fatal.empty()) {
    eager_inputs_.clear();
  } else {
    for (const Response& r : list.responses) {
      for (const std::string& name : r.names) eager_inputs_.erase(name);
    }
  }
  std::string bytes = encode(list);
  frame_contribution(bytes, result);
  for (int r = 1; r < options_.size; ++r) control_.send(r, bytes);  // a gone rank is ignored
  if (!result.empty()) return;  // rank 0's op is done (reduce_eager)
  execute(list);
}

std::optional<Clock::time_point> Engine::liveness_due(Clock::time_point now) const {
  if (controller_) {
    if (!controller_->waiting()) return std::nullopt;
    return std::max(now, last_sent_ + kCoordinatorKeepalive);
  }
  if (options_.coordinator_timeout.count() == 0 || stopped_) return std::nullopt;
  // Ops may become pending from a caller's thread while this one sleeps (workers send their own
  // batches): look at least once a second, and at the limit when already waiting.
  const Clock::time_point next_look = now + kCoordinatorKeepalive;
  return waiting_ ? std::min(next_look, last_heard_ + options_.coordinator_timeout) : next_look;
}

bool Engine::check_coordinator(Clock::time_point now) {
  if (controller_ || options_.coordinator_timeout.count() == 0) return true;
  std::string waiting_on;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!pending_.empty()) waiting_on = pending_.begin()->first;
  }
  if (waiting_on.empty()) {
    waiting_ = false;
    return true;
  }
  if (!waiting_) {  // the wait starts now
    waiting_ = true;
    last_heard_ = now;
    return true;
  }
  if (now - last_heard_ < options_.coordinator_timeout) return true;
  fail_everything(coordinator_silence(now - last_heard_, waiting_on), HVD_ERR_PEER_LOST);
  return false;
}

std::string coordinator_silence(Clock::duration silent, const std::string& waiting_on) {
  return fmt::format(
      "rank 0 (the coordinator) has not been heard from for {} s while this rank waits on '{}': "
      "it is frozen (stopped, in a debugger), its host stalls, or the link to it was cut without "
      "a reset (a live coordinator says so every {} s); HOROVOD_GLOO_TIMEOUT_SECONDS sets how "
      "long to wait",
      std::chrono::duration_cast<std::chrono::seconds>(silent).count(), waiting_on,
      std::chrono::duration_cast<std::chrono::seconds>(kCoordinatorKeepalive).count());
}

std::vector<std::shared_ptr<detail::OpState>> Engine::take_pending(
    const std::vector<std::string>& names) {
  std::vector<std::shared_ptr<detail::OpState>> ops;
  ops.reserve(names.size());
  std::lock_guard<std::mutex> lock(mutex_);
  for (const std::string& name : names) {
    auto it = pending_.find(name);
    if (it == pending_.end()) continue;
    ops.push_back(std::move(it->second));
    pending_.erase(it);
    in_flight_.erase(name);
  }
  return ops;
}

void Engine::execute(const ResponseList& list) {
  for (const Response& response : list.responses) run_response(response);
  if (!list.fatal.empty()) fail_everything(list.fatal, list.fatal_status);
}

void Engine::run_response(const Response& response) {
  std::vector<std::shared_ptr<detail::OpState>> ops = take_pending(response.names);
  if (ops.size() != response.names.size()) {
    // A shutdown on this rank failed the op already, or an error names an op this rank never
    // submitted (another rank's duplicate): nothing to run here.
    if (response.error.empty()) {
      for (auto& op : ops) {
        op->finish(
            op_failure(HVD_ERR_INTERNAL,
                       fmt::format("the coordinator scheduled {} ops of which this rank knows "
                                   "{}",
                                   response.names.size(), ops.size())));
      }
      return;
    }
  }
  if (!response.error.empty()) {
    const hvd_status status = response.departed ? HVD_ERR_PEER_LOST : HVD_ERR_INVALID_ARGUMENT;
    for (auto& op : ops) op->finish(op_failure(status, response.error));
    return;
  }
  ++responses_;
  run_ops(runner_, ops, options_.timeline);
}

bool poll_until(std::vector<pollfd>& fds, std::optional<Clock::time_point> wake_at) {
  timespec timeout{};
  if (wake_at) {
    const auto left = std::max<std::int64_t>(
        0, std::chrono::duration_cast<std::chrono::nanoseconds>(*wake_at - Clock::now()).count());
    timeout.tv_sec = static_cast<time_t>(left / 1000000000);
    timeout.tv_nsec = static_cast<long>(left % 1000000000);
  }
  return ::ppoll(fds.data(), fds.size(), wake_at ? &timeout : nullptr, nullptr) >= 0 ||
         errno == EINTR;
}

void run_ops(OpRunner& runner, const std::vector<std::shared_ptr<detail::OpState>>& ops,
             Timeline* timeline) {
  std::exception_ptr error;
  try {
    at_boundary([&] { runner.run(ops, timeline); });
  } catch (...) {
    error = std::current_exception();
  }
  // Every op done first, then the waiters woken: a thread waiting on each handle in turn wakes
  // once per response instead of once per op.
  for (auto& op : ops) op->mark_done(error);
  for (auto& op : ops) op->cv.notify_all();
}

void Engine::fail_everything(const std::string& why, hvd_status status) {
  std::unordered_map<std::string, std::shared_ptr<detail::OpState>> ops;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (failed_.empty()) {
      failed_ = why;
      failed_status_ = status;
    }
    if (!stopped_) broken_ = true;  // not hvd::shutdown()'s own
    for (auto& op : queue_) pending_[op->request.name] = op;
    queue_.clear();
    in_flight_.clear();
    ops.swap(pending_);
  }
  for (auto& [name, op] : ops) {
    op->finish(
        op_failure(stopped_ ? HVD_ERR_NOT_INITIALIZED : status,
                   fmt::format("{} '{}' failed: {}", op_kind_name(op->request.kind), name, why)));
  }
}

}  // namespace hvd::runtime
