#include "allreduce/engine/cycle_engine.h"

#include <sched.h>

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "allreduce/api/log.h"
#include "allreduce/api/status_error.h"
#include "allreduce/engine/timeline.h"

namespace hvd::runtime {
namespace {

// Tells the core this thread is spinning (a hyperthread sibling gets the pipeline); no system call.
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

}  // namespace

CycleSignal CycleEngine::doorbell_signal(std::uint64_t cycle) {
  CycleSignal s;
  s.doorbell = cycle;  // 0: a keepalive
  return s;
}

CycleEngine::CycleEngine(OpRunner& runner, ControlPlane control,
                         std::unique_ptr<CycleTransport> transport, EngineOptions options,
                         std::size_t cache_capacity)
    : runner_(runner),
      control_(std::move(control)),
      options_(options),
      transport_(std::move(transport)),
      cache_(cache_capacity),
      controller_(options_.controller),
      last_seen_(static_cast<std::size_t>(options_.size)) {
  if (!wakeup_.ok()) {
    throw StatusError(
        HVD_ERR_INTERNAL,
        fmt::format("cannot create the engine's eventfd/timerfd: {}", std::strerror(errno)));
  }
  thread_ = std::thread([this] { run_thread(); });
}

CycleEngine::~CycleEngine() { shutdown(); }

EngineStats CycleEngine::stats() const {
  return {cycles_.load(),          hits_.load(),  negotiated_.load(), doorbells_.load(),
          decided_by_bits_.load(), eager_.load(), responses_.load()};
}

bool CycleEngine::broken() {
  // A peer lost, a stall shutdown, a cycle that never completed: a collective may still be
  // pending on this rank, which MPI_Finalize would wait on forever.
  std::lock_guard<std::mutex> lock(drive_mutex_);
  if (posted_ || broken_) {
    logger().debug(
        "the job broke under this rank: {}",
        broken_ ? failed_ : fmt::format("negotiation cycle {} left unfinished", cycle_ + 1));
  }
  return posted_ || broken_;
}

// ---- Submitting and waiting threads ----

void CycleEngine::submit_group(std::span<const std::shared_ptr<detail::OpState>> ops, bool now) {
  if (ops.empty()) return;
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(ops_mutex_);
    const Request& first = ops.front()->request;
    if (!failed_.empty()) {
      throw StatusError(failed_status_, fmt::format("{} '{}' cannot run: {}",
                                                    op_kind_name(first.kind), first.name, failed_));
    }
    if (stopping_) throw StatusError(HVD_ERR_NOT_INITIALIZED, "libhvd is shutting down");
    if (!gone_.empty()) {  // what the coordinator answers once a rank said goodbye
      for (const auto& op : ops) {
        op->finish(op_failure(HVD_ERR_PEER_LOST,
                              fmt::format("tensor '{}' cannot run: {}", op->request.name, gone_)));
      }
      return;
    }
    const std::size_t queued = queue_.size();
    for (const auto& op : ops) {
      if (!add_op(op)) {
        // All or nothing: the group's ops queued so far leave again.
        for (std::size_t i = queued; i < queue_.size(); ++i)
          ops_.erase(queue_[i]->op->request.name);
        queue_.resize(queued);
        throw StatusError(
            HVD_ERR_INVALID_ARGUMENT,
            fmt::format("a tensor named '{}' is already in flight on this rank", op->request.name),
            "wait for the earlier op of that name, or give this one another name");
      }
    }
    if (!now && batch_.add()) {  // the first submission of a batch starts the batching delay
      due_ = true;
      wake = true;
    }
  }
  if (wake) wakeup_.notify();
}

bool CycleEngine::add_op(const std::shared_ptr<detail::OpState>& op) {
  OpsByName::insert_return_type added;
  if (spare_.empty()) {
    auto [it, inserted] = ops_.try_emplace(op->request.name, InFlight{op});
    added.position = it;
    added.inserted = inserted;
  } else {
    OpsByName::node_type node = std::move(spare_.back());
    spare_.pop_back();
    node.key() = op->request.name;
    node.mapped() = InFlight{op};
    added = ops_.insert(std::move(node));
    if (!added.inserted) {  // the name is in flight: keep the node, not this op
      added.node.mapped() = InFlight{};
      spare_.push_back(std::move(added.node));
    }
  }
  if (!added.inserted) return false;
  queue_.push_back(&added.position->second);
  return true;
}

void CycleEngine::wait(detail::OpState& op, Clock::time_point deadline) {
  ++waiters_;
  auto nap = kFirstNap;
  while (!op.finished()) {
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
                         [&] { return op.done.load(std::memory_order_relaxed); });
      }
      ++waiters_;
      continue;
    }
    if (now - started < kQuietSpin) {
      cpu_relax();
    } else if (now - started < kSpin) {
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
    try {
      post(now, waiter);
    } catch (const StatusError& e) {
      end_cycles(e.what(), e.status());  // the transport failed: see progress()
      return Step::kIdle;
    }
    parked_ = waiter && !brought_new_;
  }
  if (!progress(now)) {
    if (ended_) return Step::kIdle;
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

void CycleEngine::post(Clock::time_point now, bool waiter) {
  // The announced ops' requests stay valid while this thread holds drive_mutex_: only a cycle
  // (or the end of the cycles) finishes an announced op.
  hits_buf_.clear();
  misses_buf_.clear();
  bool goodbye = false;
  const detail::OpState* alone = nullptr;  // the one op this rank brings, if one
  {
    std::lock_guard<std::mutex> lock(ops_mutex_);
    posted_first_ = queue_.empty() ? std::string() : queue_.front()->op->request.name;
    if (queue_.size() == 1) alone = queue_.front()->op.get();
    for (InFlight* entry : queue_) {
      const Request& request = entry->op->request;
      if (auto slot = cache_.hit(request)) {
        hits_buf_.push_back(*slot);
        entry->cache_slot = *slot;
      } else {
        misses_buf_.push_back(&request);
      }
      entry->announced = true;
    }
    queue_.clear();
    due_ = false;
    batch_.taken(waiter);
    if (stopping_ && !said_goodbye_) {
      goodbye = true;
      said_goodbye_ = true;
    }
  }
  hits_ += hits_buf_.size();
  negotiated_ += misses_buf_.size();
  brought_new_ = !hits_buf_.empty() || !misses_buf_.empty() || goodbye;
  rang_ = false;
  posted_ = true;
  posted_at_ = now;
  driving_ = true;
  // The AND round first when the last cycle says so (try_and_) and the cache holds anything (the
  // same on every rank, as the caches and the cycles' outcomes are):
  // each rank's hit slots as bits, then the same bits inverted (their AND is the complement of
  // every rank's OR), then a word of flags, inverted (misses, a goodbye). In the steady state of
  // a training loop that decides the cycle (decide_from_and); otherwise the allgather round
  // follows with the full contributions.
  // A small allreduce brought alone comes with its input (eager data): when every rank brings
  // the same one so, the allgather round gives every rank every input, and the op runs from them
  // with no collective of its own (run_response).
  const std::string_view data = alone != nullptr ? runner_.eager_input(*alone) : std::string_view();
  const std::size_t words = try_and_ ? (cache_.slot_count() + 63) / 64 : 0;
  if (words == 0) {
    std::string contribution = encode_contribution(hits_buf_, misses_buf_, goodbye);
    frame_contribution(contribution, data);
    transport_->start(std::move(contribution), data.size());
    return;
  }
  std::vector<std::uint64_t> bits(2 * words + 1, 0);
  for (std::uint32_t slot : hits_buf_) bits[slot / 64] |= std::uint64_t{1} << (slot % 64);
  for (std::size_t i = 0; i < words; ++i) bits[words + i] = ~bits[i];
  const bool more = !misses_buf_.empty() || goodbye;
  bits[2 * words] = more ? ~std::uint64_t{1} : ~std::uint64_t{0};
  contribution_ = encode_contribution(hits_buf_, misses_buf_, goodbye);
  frame_contribution(contribution_, data);
  contribution_data_ = data.size();
  and_round_ = true;
  transport_->start_and(std::move(bits));
}

bool CycleEngine::progress(Clock::time_point now) {
  try {
    return progress_cycle(now);
  } catch (const StatusError& e) {
    // The transport failed (a peer's connection closed, a garbled round): no cycle can complete
    // any more, on whichever thread moved it on. Rank 0 says so to every rank, as it does for a
    // control connection that closes (read_signals).
    tell_ranks(e.what(), e.status());
    end_cycles(e.what(), e.status());
    return false;
  }
}

bool CycleEngine::progress_cycle(Clock::time_point now) {
  if (and_round_) {
    std::optional<std::vector<std::uint64_t>> anded = transport_->anded();
    if (!anded) return false;
    and_round_ = false;
    if (std::optional<Decision> fast = decide_from_and(*anded)) {
      try_and_ = true;
      ++decided_by_bits_;
      finish(*fast);
      return true;
    }
    // Every rank decided the same: all go on.
    transport_->start(std::move(contribution_), contribution_data_);
  }
  const std::vector<std::string>* contributions = transport_->gathered();
  if (contributions == nullptr) return false;
  const Decision decision = decide(*contributions, now);
  // A cycle decided from eager data is most often followed by another such (a loop of
  // synchronous calls): the next starts with the allgather round, which carries the data.
  try_and_ = decision.hits_only && decision.eager.empty();
  if (!decision.list.fatal.empty()) {
    // A stall shutdown is rank 0's decision alone (it depends on its clock): tell the others.
    tell_ranks(decision.list.fatal, decision.list.fatal_status);
  }
  finish(decision);
  return true;
}

void CycleEngine::finish(const Decision& reply) {
  posted_ = false;
  driving_ = false;
  ++cycle_;
  ++cycles_;
  last_idle_ = reply.idle;
  for (const Response& response : reply.list.responses) run_response(response, reply);
  run_ops_.clear();
  last_heard_ = Clock::now();  // rank 0 took part (counted after the work, which may be long)
  if (!reply.list.fatal.empty()) {
    end_cycles(reply.list.fatal, reply.list.fatal_status);
    return;
  }
  if (!reply.shut_down.empty()) {
    // No cycle can run without every rank: what is pending here, and everything submitted from
    // now on, fails as the coordinator fails a tensor submitted after a rank's goodbye.
    ended_ = true;
    OpsByName ops;
    {
      std::lock_guard<std::mutex> lock(ops_mutex_);
      gone_ = fmt::format("rank(s) {} already shut down", fmt::join(reply.shut_down, ", "));
      queue_.clear();
      ops.swap(ops_);
    }
    for (auto& [name, entry] : ops) {
      const auto& op = entry.op;
      op->finish(op_failure(stopping_ ? HVD_ERR_NOT_INITIALIZED : HVD_ERR_PEER_LOST,
                            stopping_ ? fmt::format("{} '{}' failed: hvd::shutdown() was called "
                                                    "while it was pending",
                                                    op_kind_name(op->request.kind), name)
                                      : fmt::format("tensor '{}' cannot run: {}", name, gone_)));
    }
  }
}

void CycleEngine::run_response(const Response& response, const Decision& decision) {
  // Kept from response to response (their capacity: no allocation per response); finish()
  // drops the ops' references once the cycle's responses ran.
  std::vector<std::shared_ptr<detail::OpState>>& ops = run_ops_;
  std::vector<std::uint32_t>& slots = run_slots_;  // each op's cache slot when announced
  ops.clear();
  slots.clear();
  {
    std::lock_guard<std::mutex> lock(ops_mutex_);
    for (const std::string& name : response.names) {
      // Decided while some ranks had joined: on those ranks the op is a zero tensor of its own
      // (every rank takes the Controller's copy, so that none is left behind).
      std::optional<Request> joined = controller_.take_joined_request(name);
      auto it = ops_.find(name);
      if (it == ops_.end() || !it->second.announced) {
        if (joined && response.error.empty()) {
          ops.push_back(zero_op(std::move(*joined)));
          slots.push_back(ResponseCache::kNoSlot);
        }
        continue;
      }
      OpsByName::node_type node = ops_.extract(it);
      ops.push_back(std::move(node.mapped().op));
      slots.push_back(node.mapped().cache_slot);
      if (spare_.size() < kSpareNodes) spare_.push_back(std::move(node));
    }
  }
  if (response.kind == OpKind::kJoin) {
    // No collective: every rank has joined; each join op says who joined last.
    for (const std::string& name : response.names) {
      const std::optional<int> last = controller_.take_join_result(name);
      for (auto& op : ops) {
        if (op->request.name == name && response.error.empty()) {
          op->received_splits.assign(1, last.value_or(-1));
        }
      }
    }
  }
  // Every rank updates its cache here, in the same order: a tensor that ran is cached as this
  // rank submitted it; one that failed is negotiated in full next time.
  if (!response.error.empty()) {
    for (const std::string& name : response.names) cache_.erase(name);
    const hvd_status status = response.departed ? HVD_ERR_PEER_LOST : HVD_ERR_INVALID_ARGUMENT;
    for (auto& op : ops) op->finish(op_failure(status, response.error));
    return;
  }
  if (ops.size() != response.names.size()) {
    for (auto& op : ops) {
      op->finish(
          op_failure(HVD_ERR_INTERNAL,
                     fmt::format("the coordinator scheduled {} ops of which this rank knows {}",
                                 response.names.size(), ops.size())));
    }
    return;
  }
  for (std::size_t i = 0; i < ops.size(); ++i) cache_.put(ops[i]->request, slots[i]);
  ++responses_;
  if (!decision.eager.empty() && response.kind == OpKind::kAllreduce && ops.size() == 1 &&
      response.names.front() == decision.eager) {
    ++eager_;
    run_eager_op(runner_, ops.front(), decision.eager_inputs, options_.timeline);
    return;
  }
  run_ops(runner_, ops, options_.timeline);
}

std::shared_ptr<detail::OpState> CycleEngine::zero_op(Request request) {
  auto op = std::make_shared<detail::OpState>();
  op->buffer.dtype = request.dtype;
  op->buffer.shape = request.shape;
  op->in = Tensor{nullptr, request.dtype, request.shape, request.device};
  op->buffer.bytes.assign(op->in.byte_size(), std::byte{0});
  op->in.data = op->buffer.bytes.data();
  op->options = AllreduceOptions{request.op, request.prescale, request.postscale};
  op->request = std::move(request);
  return op;
}

void CycleEngine::ring(Clock::time_point now) {
  rang_ = true;
  ++doorbells_;
  const std::string bytes = encode(doorbell_signal(cycle_ + 1));
  if (root()) {
    relayed_ = std::max(relayed_, cycle_ + 1);
    rung_for_ = cycle_ + 1;
    rung_at_ = now;
    for (int r = 1; r < options_.size; ++r) control_.send(r, bytes);
  } else {
    control_.send(0, bytes);
  }
}

void CycleEngine::tell_ranks(const std::string& fatal, hvd_status status) {
  if (!root()) return;
  const std::string bytes =
      encode(CycleSignal{.doorbell = 0, .fatal = fatal, .fatal_status = status});
  for (int r = 1; r < options_.size; ++r) control_.send(r, bytes);
}

void CycleEngine::end_cycles(const std::string& fatal, hvd_status status) {
  if (root() && !ended_) transport_->abort(fatal, status);
  ended_ = true;
  broken_ = true;
  driving_ = false;  // no round to poll any more
  fail_everything(fatal, status);
}

void CycleEngine::fail_everything(const std::string& why, hvd_status status) {
  OpsByName ops;
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
        op_failure(stopped ? HVD_ERR_NOT_INITIALIZED : status,
                   fmt::format("{} '{}' failed: {}", op_kind_name(op->request.kind), name, why)));
  }
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
