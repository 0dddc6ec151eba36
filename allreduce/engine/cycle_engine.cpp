#include "allreduce/engine/cycle_engine.h"

#include <poll.h>
#include <sched.h>

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "allreduce/api/boundary.h"
#include "allreduce/api/log.h"
#include "allreduce/api/status_error.h"
#include "allreduce/engine/timeline.h"
#include "common/signal_fd.h"

namespace hvd::runtime {
namespace {

// A waiter in a started cycle polls it without sleeping this long, then naps, each nap twice the
// last up to kMaxNap: a peer a little behind costs no wake-up, one far behind little CPU.
constexpr std::chrono::microseconds kSpin{2000};
constexpr std::chrono::microseconds kFirstNap{20};
constexpr std::chrono::microseconds kMaxNap{500};

CycleSignal doorbell_signal(std::uint64_t cycle) {
  CycleSignal s;
  s.doorbell = cycle;
  return s;
}

std::exception_ptr failure(hvd_status status, const std::string& message) {
  return std::make_exception_ptr(RuntimeError(status, message));
}

}  // namespace

CycleEngine::CycleEngine(OpRunner& runner, ControlPlane control,
                         std::unique_ptr<CycleTransport> transport, EngineOptions options,
                         std::size_t cache_capacity)
    : runner_(runner),
      control_(std::move(control)),
      options_(options),
      transport_(std::move(transport)),
      cache_(cache_capacity),
      controller_(options_.controller) {
  if (!wakeup_.ok()) {
    throw StatusError(
        HVD_ERR_INTERNAL,
        fmt::format("cannot create the engine's eventfd/timerfd: {}", std::strerror(errno)));
  }
  thread_ = std::thread([this] { run_thread(); });
}

CycleEngine::~CycleEngine() { shutdown(); }

EngineStats CycleEngine::stats() const {
  return {cycles_.load(), hits_.load(), negotiated_.load(), doorbells_.load()};
}

bool CycleEngine::broken() {
  // A peer lost, a stall shutdown, a cycle that never completed: a collective may still be
  // pending on this rank, which MPI_Finalize would wait on forever.
  // Asked before shutdown(), so failed_ is not the goodbye's.
  std::lock_guard<std::mutex> lock(drive_mutex_);
  std::lock_guard<std::mutex> ops(ops_mutex_);
  return posted_ || !failed_.empty();
}

// ---- Submitting and waiting threads ----

void CycleEngine::submit(const std::shared_ptr<detail::OpState>& op, bool now) {
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(ops_mutex_);
    if (!failed_.empty()) {
      throw StatusError(failed_status_,
                        fmt::format("{} '{}' cannot run: {}", op_kind_name(op->request.kind),
                                    op->request.name, failed_));
    }
    if (stopping_) throw StatusError(HVD_ERR_NOT_INITIALIZED, "libhvd is shutting down");
    if (!gone_.empty()) {  // what the coordinator answers once a rank said goodbye
      op->finish(failure(HVD_ERR_INVALID_ARGUMENT,
                         fmt::format("tensor '{}' cannot run: {}", op->request.name, gone_)));
      return;
    }
    auto [it, inserted] = ops_.try_emplace(op->request.name, InFlight{op, false});
    if (!inserted) {
      throw StatusError(
          HVD_ERR_INVALID_ARGUMENT,
          fmt::format("a tensor named '{}' is already in flight on this rank", op->request.name),
          "wait for the earlier op of that name, or give this one another name");
    }
    queue_.push_back(&it->second);
    if (!now) {
      if (options_.cycle_time.count() == 0) {
        due_ = true;
        wake = true;
      } else if (!batch_armed_) {  // the first submission of a batch starts the batching delay
        batch_armed_ = true;
        wakeup_.arm(options_.cycle_time);
      }
    }
  }
  if (wake) wakeup_.notify();
}

bool CycleEngine::done(detail::OpState& op) {
  std::lock_guard<std::mutex> lock(op.mutex);
  return op.done;
}

void CycleEngine::wait(detail::OpState& op, Clock::time_point deadline) {
  ++waiters_;
  auto nap = kFirstNap;
  while (!done(op)) {
    const auto now = Clock::now();
    if (now >= deadline) break;
    Step step_result;
    Clock::time_point started;
    {
      std::lock_guard<std::mutex> lock(drive_mutex_);
      step_result = step(now, true);
      started = posted_at_;
    }
    if (step_result == Step::kDone) {
      nap = kFirstNap;
      continue;
    }
    if (step_result == Step::kIdle) {
      // Nothing this thread can move on: the op runs in a cycle another rank starts, which the
      // background thread joins (doorbell): it drives while no waiter does. Look again now and
      // then: a submission on this rank may give a reason to start one.
      --waiters_;
      {
        std::unique_lock<std::mutex> lock(op.mutex);
        op.cv.wait_until(lock, std::min(deadline, now + std::chrono::milliseconds(10)),
                         [&] { return op.done; });
      }
      ++waiters_;
      continue;
    }
    if (now - started < kSpin) {
      sched_yield();
    } else {
      std::this_thread::sleep_for(nap);
      nap = std::min(nap * 2, kMaxNap);
    }
  }
  // A cycle this thread started and leaves unfinished (its deadline passed, or its op ran and
  // another's is parked) is the background thread's to finish.
  if (--waiters_ == 0 && driving_.load()) wakeup_.notify();
}

// ---- Moving the cycles on (under drive_mutex_) ----

CycleEngine::Step CycleEngine::step(Clock::time_point now, bool waiter) {
  if (ended_) return Step::kIdle;
  if (!posted_) {
    if (!want_cycle(waiter)) return Step::kIdle;
    post(now);
    parked_ = waiter && !brought_new_;
  }
  if (!progress(now)) {
    if (!rang_ && brought_new_ && now - posted_at_ >= kDoorbellAfter) ring(now);
    return Step::kWaiting;
  }
  return Step::kDone;
}

bool CycleEngine::want_cycle(bool waiter) {
  if (doorbell_ == cycle_ + 1) return true;  // another rank waits in the next cycle
  std::lock_guard<std::mutex> lock(ops_mutex_);
  if (stopping_ && !said_goodbye_) return true;
  if (!queue_.empty() && (waiter || due_)) return true;
  // A waiter parks in the next cycle while its op is pending, unless nobody brought anything to
  // the last one (then waiting in another would only spin).
  return waiter && ops_.size() > queue_.size() && !last_idle_;
}

void CycleEngine::post(Clock::time_point now) {
  CycleContribution mine;
  {
    std::lock_guard<std::mutex> lock(ops_mutex_);
    posted_first_ = queue_.empty() ? std::string() : queue_.front()->op->request.name;
    for (InFlight* entry : queue_) {
      const Request& request = entry->op->request;
      if (auto slot = cache_.hit(request)) {
        mine.hits.push_back(*slot);
      } else {
        mine.misses.requests.push_back(request);
      }
      entry->announced = true;
    }
    queue_.clear();
    due_ = false;
    if (batch_armed_) {
      batch_armed_ = false;
      wakeup_.disarm();
    }
    if (stopping_ && !said_goodbye_) {
      mine.misses.shutdown = true;
      said_goodbye_ = true;
    }
  }
  hits_ += mine.hits.size();
  negotiated_ += mine.misses.requests.size();
  brought_new_ = !mine.hits.empty() || !mine.misses.requests.empty() || mine.misses.shutdown;
  rang_ = false;
  posted_ = true;
  posted_at_ = now;
  driving_ = true;
  transport_->start(encode(mine));
}

bool CycleEngine::progress(Clock::time_point now) {
  std::optional<std::vector<std::string>> contributions = transport_->gathered();
  if (!contributions) return false;
  const Decision decision = decide(*contributions, now);
  if (root() && !decision.list.fatal.empty()) {
    // A stall shutdown is rank 0's decision alone (it depends on its clock): tell the others.
    const std::string bytes = encode(CycleSignal{
        .doorbell = 0, .fatal = decision.list.fatal, .fatal_status = decision.list.fatal_status});
    for (int r = 1; r < options_.size; ++r) control_.send(r, bytes);
  }
  finish(decision);
  return true;
}

std::optional<CycleEngine::Decision> CycleEngine::decide_hits(const std::vector<CycleContribution>& parts) {
  // The steady state of a training loop: every rank brought the same cached tensors and nothing
  // else, and nothing waits from earlier cycles. The Controller would find each ready when the
  // last rank's request arrives, in that rank's order, valid (they ran with these very requests),
  // and fuse them: that is decided here without its table.
  if (!controller_.idle()) return std::nullopt;
  const std::vector<std::uint32_t>& last = parts.back().hits;
  if (last.empty()) return std::nullopt;
  std::vector<std::uint32_t> sorted(last);
  std::sort(sorted.begin(), sorted.end());
  std::vector<std::uint32_t> other;
  for (const CycleContribution& c : parts) {
    if (!c.misses.requests.empty() || c.misses.shutdown || c.hits.size() != last.size()) {
      return std::nullopt;
    }
    other.assign(c.hits.begin(), c.hits.end());
    std::sort(other.begin(), other.end());
    if (other != sorted) return std::nullopt;
  }
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) return std::nullopt;
  std::vector<ReadyOp> ready;
  ready.reserve(last.size());
  for (std::uint32_t slot : last) {
    const Request* cached = cache_.at(slot);
    if (cached == nullptr) return std::nullopt;  // the full path reports it
    ready.push_back({cached, nullptr});
  }
  if (options_.timeline != nullptr) {
    for (int r = 0; r < options_.size; ++r) {
      for (const ReadyOp& op : ready) options_.timeline->negotiating(*op.request, r);
    }
  }
  Decision decision;
  fuse_responses(ready, controller_.options().fusion_threshold, decision.list.responses);
  return decision;
}

CycleEngine::Decision CycleEngine::decide(const std::vector<std::string>& contributions,
                                          Clock::time_point now) {
  Decision decision;
  std::vector<CycleContribution> parts(contributions.size());
  for (std::size_t r = 0; r < contributions.size(); ++r) {
    try {
      parts[r] = decode_contribution(contributions[r]);
    } catch (const std::exception& e) {
      decision.list.fatal = fmt::format(
          "rank {} sent a negotiation message the others cannot read ({}); do all ranks run the "
          "same libhvd version?",
          r, e.what());
      return decision;
    }
  }
  if (std::optional<Decision> fast = decide_hits(parts)) {
    if (options_.timeline != nullptr) {
      for (const Response& r : fast->list.responses) options_.timeline->negotiated(r);
    }
    return std::move(*fast);
  }
  bool brought = false;
  for (int r = 0; r < options_.size; ++r) {
    CycleContribution& c = parts[static_cast<std::size_t>(r)];
    RequestList list = std::move(c.misses);
    for (std::uint32_t slot : c.hits) {
      // This rank's own cached request stands for rank r's: they agree on everything the
      // Controller validates (they ran together).
      const Request* cached = cache_.at(slot);
      if (cached == nullptr) {
        decision.list.fatal = fmt::format(
            "rank {} named response cache slot {}, which is empty on rank {}: the ranks' caches "
            "differ (do all ranks run the same libhvd version?)",
            r, slot, options_.rank);
        return decision;
      }
      list.requests.push_back(*cached);
    }
    brought |= !list.requests.empty() || list.shutdown;
    if (options_.timeline != nullptr) {
      for (const Request& q : list.requests) options_.timeline->negotiating(q, r);
    }
    controller_.add(r, std::move(list), now);
  }
  if (root()) {
    for (const std::string& warning : controller_.check_stalls(now)) logger().warn("{}", warning);
    if (auto next = controller_.next_stall_check();
        next && (!stall_armed_ || *next < *stall_armed_)) {
      stall_armed_ = next;
      wakeup_.notify();  // the background thread sleeps without this deadline
    }
  }
  decision.list = controller_.take();
  if (options_.timeline != nullptr) {
    for (const Response& r : decision.list.responses) options_.timeline->negotiated(r);
  }
  const std::set<int>& gone = controller_.shut_down();
  decision.shut_down.assign(gone.begin(), gone.end());
  decision.idle = !brought && decision.list.responses.empty() && decision.list.fatal.empty();
  return decision;
}

void CycleEngine::finish(const Decision& reply) {
  posted_ = false;
  driving_ = false;
  ++cycle_;
  ++cycles_;
  last_idle_ = reply.idle;
  for (const Response& response : reply.list.responses) run_response(response);
  last_heard_ = Clock::now();  // rank 0 took part (counted after the work, which may be long)
  if (!reply.list.fatal.empty()) {
    end_cycles(reply.list.fatal, reply.list.fatal_status);
    return;
  }
  if (!reply.shut_down.empty()) {
    // No cycle can run without every rank: what is pending here, and everything submitted from
    // now on, fails as the coordinator fails a tensor submitted after a rank's goodbye.
    ended_ = true;
    std::unordered_map<std::string, InFlight> ops;
    {
      std::lock_guard<std::mutex> lock(ops_mutex_);
      gone_ = fmt::format("rank(s) {} already shut down", fmt::join(reply.shut_down, ", "));
      queue_.clear();
      ops.swap(ops_);
    }
    for (auto& [name, entry] : ops) {
      const auto& op = entry.op;
      op->finish(failure(stopping_ ? HVD_ERR_NOT_INITIALIZED : HVD_ERR_INVALID_ARGUMENT,
                         stopping_ ? fmt::format("{} '{}' failed: hvd::shutdown() was called "
                                                 "while it was pending",
                                                 op_kind_name(op->request.kind), name)
                                   : fmt::format("tensor '{}' cannot run: {}", name, gone_)));
    }
  }
}

void CycleEngine::run_response(const Response& response) {
  std::vector<std::shared_ptr<detail::OpState>> ops;
  {
    std::lock_guard<std::mutex> lock(ops_mutex_);
    for (const std::string& name : response.names) {
      auto it = ops_.find(name);
      if (it == ops_.end() || !it->second.announced) continue;
      ops.push_back(std::move(it->second.op));
      ops_.erase(it);
    }
  }
  // Every rank updates its cache here, in the same order: a tensor that ran is cached as this
  // rank submitted it; one that failed is negotiated in full next time.
  if (!response.error.empty()) {
    for (const std::string& name : response.names) cache_.erase(name);
    for (auto& op : ops) op->finish(failure(HVD_ERR_INVALID_ARGUMENT, response.error));
    return;
  }
  if (ops.size() != response.names.size()) {
    for (auto& op : ops) {
      op->finish(failure(HVD_ERR_INTERNAL,
                         fmt::format("the coordinator scheduled {} ops of which this rank knows {}",
                                     response.names.size(), ops.size())));
    }
    return;
  }
  for (const auto& op : ops) cache_.put(op->request);
  std::exception_ptr error;
  try {
    at_boundary([&] { runner_.run(ops, options_.timeline); });
  } catch (...) {
    error = std::current_exception();
  }
  for (auto& op : ops) op->mark_done(error);
  for (auto& op : ops) op->cv.notify_all();
}

void CycleEngine::ring(Clock::time_point /*now*/) {
  rang_ = true;
  ++doorbells_;
  const std::string bytes = encode(doorbell_signal(cycle_ + 1));
  if (root()) {
    relayed_ = std::max(relayed_, cycle_ + 1);
    for (int r = 1; r < options_.size; ++r) control_.send(r, bytes);
  } else {
    control_.send(0, bytes);
  }
}

void CycleEngine::end_cycles(const std::string& fatal, hvd_status status) {
  ended_ = true;
  fail_everything(fatal, status);
}

void CycleEngine::fail_everything(const std::string& why, hvd_status status) {
  std::unordered_map<std::string, InFlight> ops;
  bool stopped;
  {
    std::lock_guard<std::mutex> lock(ops_mutex_);
    if (failed_.empty()) {
      failed_ = why;
      failed_status_ = status;
    }
    queue_.clear();
    ops.swap(ops_);
    stopped = stopping_;
  }
  for (auto& [name, entry] : ops) {
    const auto& op = entry.op;
    op->finish(
        failure(stopped ? HVD_ERR_NOT_INITIALIZED : status,
                fmt::format("{} '{}' failed: {}", op_kind_name(op->request.kind), name, why)));
  }
}

// ---- The background thread ----

void CycleEngine::run_thread() {
  block_sigpipe_for_this_thread();
  try {
    while (run_once()) {
    }
  } catch (const std::exception& e) {
    std::lock_guard<std::mutex> lock(drive_mutex_);
    end_cycles(fmt::format("the engine's thread failed: {}", e.what()), HVD_ERR_BACKEND);
  } catch (...) {
    std::lock_guard<std::mutex> lock(drive_mutex_);
    end_cycles("the engine's thread failed", HVD_ERR_BACKEND);
  }
}

bool CycleEngine::run_once() {
  // Sleep until a submission is due, a signal from another rank, the time to poll a cycle
  // nobody else moves on, or a stall check.
  std::vector<pollfd> fds{{wakeup_.fd(), POLLIN, 0}, {wakeup_.timer_fd(), POLLIN, 0}};
  std::vector<int> ranks{-1, -1};
  for (int r = 0; r < options_.size; ++r) {
    if (r != options_.rank && control_.peer(r) >= 0) {
      fds.push_back({control_.peer(r), POLLIN, 0});
      ranks.push_back(r);
    }
  }
  std::optional<Clock::time_point> wake_at;
  std::optional<Clock::time_point> liveness;  // when the liveness check is due
  const bool drive = driving_.load() && waiters_.load() == 0;
  if (drive) wake_at = Clock::now() + nap_;
  {
    std::lock_guard<std::mutex> lock(drive_mutex_);
    if (root()) {
      // The stall inspector's next turn. A cycle that adds the first pending tensor (or an
      // earlier deadline) wakes this thread to look again (decide()).
      stall_armed_ = ended_ ? std::nullopt : controller_.next_stall_check();
      if (stall_armed_ && (!wake_at || *stall_armed_ < *wake_at)) wake_at = stall_armed_;
      // A cycle some rank never joins (check_stalls): looked at every half warning period.
      const auto warning = options_.controller.stall_warning;
      if (!ended_ && warning.count() > 0) {
        const auto look = Clock::now() + warning / 2;
        if (!wake_at || look < *wake_at) wake_at = look;
      }
    }
    liveness = liveness_due(Clock::now());
    if (liveness && (!wake_at || *liveness < *wake_at)) wake_at = liveness;
  }
  timespec timeout{};
  if (wake_at) {
    const auto left = std::max<std::int64_t>(
        0, std::chrono::duration_cast<std::chrono::nanoseconds>(*wake_at - Clock::now()).count());
    timeout.tv_sec = static_cast<time_t>(left / 1000000000);
    timeout.tv_nsec = static_cast<long>(left % 1000000000);
  }
  if (::ppoll(fds.data(), fds.size(), wake_at ? &timeout : nullptr, nullptr) < 0 &&
      errno != EINTR) {
    std::lock_guard<std::mutex> lock(drive_mutex_);
    end_cycles(fmt::format("the engine's poll() failed: {}", std::strerror(errno)),
               HVD_ERR_BACKEND);
    return false;
  }
  if (fds[0].revents != 0) wakeup_.drain();
  if (fds[1].revents != 0) {
    wakeup_.drain_timer();
    std::lock_guard<std::mutex> lock(ops_mutex_);
    due_ = true;
  }
  for (std::size_t i = 2; i < fds.size(); ++i) {
    if (fds[i].revents != 0) read_signals(ranks[i]);
  }
  bool stopping;
  {
    std::lock_guard<std::mutex> lock(ops_mutex_);
    stopping = stopping_;
  }
  if (stopping) {
    say_goodbye();
    return false;
  }
  const auto now = Clock::now();
  if (waiters_.load() == 0) {
    std::lock_guard<std::mutex> lock(drive_mutex_);
    Step s;
    while ((s = step(now, false)) == Step::kDone) {
    }
    nap_ = s == Step::kWaiting && drive ? std::min(nap_ * 2, kMaxNap) : kFirstNap;
  }
  if (root()) check_stalls(now);
  if (liveness && now >= *liveness) {
    std::lock_guard<std::mutex> lock(drive_mutex_);
    if (!ended_) check_liveness(now);
  }
  return true;
}

// As the TCP engine: rank 0 tells the ranks it is alive while tensors wait for some rank, and a
// rank waiting on announced ops without a word from rank 0 (a signal or a completed cycle) for
// EngineOptions::coordinator_timeout fails them with HVD_ERR_PEER_LOST. Under drive_mutex_, so a
// collective that runs long holds the check back until it ended.
std::optional<Clock::time_point> CycleEngine::liveness_due(Clock::time_point now) {
  if (ended_) return std::nullopt;
  if (root()) {
    if (!controller_.waiting()) return std::nullopt;
    return std::max(now, last_sent_ + kCoordinatorKeepalive);
  }
  if (options_.coordinator_timeout.count() == 0) return std::nullopt;
  const Clock::time_point next_look = now + kCoordinatorKeepalive;
  return waiting_ ? std::min(next_look, last_heard_ + options_.coordinator_timeout) : next_look;
}

void CycleEngine::check_liveness(Clock::time_point now) {
  if (root()) {
    const std::string keepalive = encode(doorbell_signal(0));
    for (int r = 1; r < options_.size; ++r) control_.send(r, keepalive);
    last_sent_ = now;
    return;
  }
  std::string waiting_on;
  {
    std::lock_guard<std::mutex> lock(ops_mutex_);
    for (const auto& [name, entry] : ops_) {
      if (entry.announced) {
        waiting_on = name;
        break;
      }
    }
  }
  if (waiting_on.empty()) {
    waiting_ = false;
  } else if (!waiting_) {  // the wait starts now
    waiting_ = true;
    last_heard_ = now;
  } else if (now - last_heard_ >= options_.coordinator_timeout) {
    end_cycles(coordinator_silence(now - last_heard_, waiting_on), HVD_ERR_PEER_LOST);
  }
}

void CycleEngine::read_signals(int from) {
  auto messages = control_.receive(from);
  std::lock_guard<std::mutex> lock(drive_mutex_);
  if (!messages) {
    control_.close(from);
    if (ended_) return;  // after the cycles ended, ranks leave as they please
    if (root()) {
      const std::string why = fmt::format(
          "rank {} left the job without calling hvd::shutdown() (its control connection "
          "closed): it probably crashed or was killed",
          from);
      const std::string bytes =
          encode(CycleSignal{.doorbell = 0, .fatal = why, .fatal_status = HVD_ERR_PEER_LOST});
      for (int r = 1; r < options_.size; ++r) control_.send(r, bytes);
      end_cycles(why, HVD_ERR_PEER_LOST);
    } else {
      end_cycles(
          "rank 0 (the coordinator) is gone: its control connection closed (it exited, crashed, "
          "was killed or called hvd::shutdown())",
          HVD_ERR_PEER_LOST);
    }
    return;
  }
  if (from == 0) last_heard_ = Clock::now();  // a keepalive, a doorbell or an error: alive
  for (const std::string& m : *messages) {
    CycleSignal signal;
    try {
      signal = decode_signal(m);
    } catch (const std::exception& e) {
      end_cycles(fmt::format("rank {} sent a message this rank cannot read on the engine's "
                             "control plane ({}); do all ranks run the same libhvd version?",
                             from, e.what()),
                 HVD_ERR_BACKEND);
      return;
    }
    if (!signal.fatal.empty()) {
      end_cycles(signal.fatal, signal.fatal_status);
      return;
    }
    on_doorbell(from, signal.doorbell);
  }
}

void CycleEngine::on_doorbell(int from, std::uint64_t cycle) {
  if (cycle <= cycle_) return;  // that cycle completed here already
  doorbell_ = std::max(doorbell_, cycle);
  if (root() && relayed_ < cycle) {  // rank 0 passes it on to every other rank
    relayed_ = cycle;
    const std::string bytes = encode(doorbell_signal(cycle));
    for (int r = 1; r < options_.size; ++r) {
      if (r != from) control_.send(r, bytes);
    }
  }
}

void CycleEngine::check_stalls(Clock::time_point now) {
  std::lock_guard<std::mutex> lock(drive_mutex_);
  if (ended_) return;
  std::string fatal;
  hvd_status status = HVD_ERR_BACKEND;
  if (const auto due = controller_.next_stall_check(); due && now >= *due) {
    for (const std::string& warning : controller_.check_stalls(now)) logger().warn("{}", warning);
    ResponseList list = controller_.take();  // responses come only from cycles: a fatal or none
    fatal = list.fatal;
    status = list.fatal_status;
  }
  // A cycle rank 0 brought new tensors to (or joined when rung) that some rank never joins: the
  // Controller cannot know of it (it hears of a cycle once it completed), and a live rank joins
  // within a doorbell. A frozen process (stopped, in a debugger) or a stalled host is left.
  const auto warning = options_.controller.stall_warning;
  const auto shutdown = options_.controller.stall_shutdown;
  if (fatal.empty() && posted_ && !parked_ && warning.count() > 0) {
    const auto waited = std::chrono::duration_cast<std::chrono::seconds>(now - posted_at_);
    const std::string brought =
        posted_first_.empty() ? std::string() : fmt::format(" (it brought '{}')", posted_first_);
    if (shutdown.count() > 0 && now - posted_at_ >= shutdown) {
      fatal = fmt::format(
          "stalled for more than HOROVOD_STALL_SHUTDOWN_TIME_SECONDS ({} s): negotiation cycle {} "
          "was never joined by every rank{}: a rank is frozen or its host stalls",
          shutdown.count() / 1000, cycle_ + 1, brought);
    } else if (now - posted_at_ >= warning && now - cycle_warned_ >= warning) {
      cycle_warned_ = now;
      logger().warn(
          "stall: rank 0 has waited {} s in negotiation cycle {}{}, which some rank has not "
          "joined although rung: is a rank frozen (stopped, in a debugger) or its host stalled?",
          waited.count(), cycle_ + 1, brought);
    }
  }
  if (fatal.empty()) return;
  const std::string bytes =
      encode(CycleSignal{.doorbell = 0, .fatal = fatal, .fatal_status = status});
  for (int r = 1; r < options_.size; ++r) control_.send(r, bytes);
  end_cycles(fatal, status);
}

void CycleEngine::say_goodbye() {
  // The goodbye goes out in a cycle of its own (after the one started, if any), which the other
  // ranks join when rung; then whatever is still pending fails.
  auto nap = kFirstNap;
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(drive_mutex_);
      if (ended_ || (said_goodbye_ && !posted_)) break;
      const Step s = step(Clock::now(), false);
      if (s == Step::kDone) {
        nap = kFirstNap;
        continue;
      }
      if (s == Step::kIdle) break;
    }
    // Signals still matter: a fatal error or a lost rank ends the wait.
    std::vector<pollfd> fds;
    std::vector<int> ranks;
    for (int r = 0; r < options_.size; ++r) {
      if (r != options_.rank && control_.peer(r) >= 0) {
        fds.push_back({control_.peer(r), POLLIN, 0});
        ranks.push_back(r);
      }
    }
    ::poll(fds.data(), fds.size(), 0);
    for (std::size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents != 0) read_signals(ranks[i]);
    }
    std::this_thread::sleep_for(nap);
    nap = std::min(nap * 2, kMaxNap);
  }
  std::lock_guard<std::mutex> lock(drive_mutex_);
  ended_ = true;
  fail_everything("hvd::shutdown() was called while it was pending", HVD_ERR_NOT_INITIALIZED);
}

void CycleEngine::shutdown() {
  {
    std::lock_guard<std::mutex> lock(ops_mutex_);
    stopping_ = true;
  }
  wakeup_.notify();
  if (thread_.joinable()) thread_.join();
}

}  // namespace hvd::runtime
