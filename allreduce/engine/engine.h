// The engine: named ops submitted from any thread, negotiated through the coordinator (rank 0)
// and run by one background thread per runtime, in the order the coordinator decided.
//
// The background thread's loop is `while (run_once())`: it sleeps in poll() on the Wakeup's
// eventfd and timerfd and the control-plane sockets, so an idle rank uses no CPU. The first
// submission of a batch arms the timer for the cycle time (HOROVOD_CYCLE_TIME; a backstop when
// waiters keep taking the batches first: BatchDelay) without waking the thread; the batch goes to
// the coordinator when the timer fires, or at once when someone waits
// on a handle: on ranks other than 0 the waiting thread sends it itself, on rank 0 the background
// thread wakes once to hand it to the Controller (fusion, validation, stall checks), which sends
// every rank the same responses. Every thread hand-off costs a wake-up (tens of microseconds on a
// VM), so each step has as few as the design allows: see bench/README.md. A small allreduce sent
// alone carries its input (eager, OpRunner::eager_input): rank 0 reduces every rank's and sends
// the result with the response, and no collective runs (Engine::reduce_eager).
#pragma once

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "allreduce/engine/control_plane.h"
#include "allreduce/engine/controller.h"
#include "allreduce/engine/op_state.h"
#include "common/unique_fd.h"
#include "contract/env_table.h"

namespace hvd::runtime {

class Timeline;

// What runs the ops the coordinator scheduled, on the engine's thread: the Runtime (its backend);
// a stand-in in the engine's unit tests.
class OpRunner {
 public:
  virtual ~OpRunner() = default;
  // One response's ops (several: a fused allreduce or broadcast). Throws StatusError.
  virtual void run(const std::vector<std::shared_ptr<detail::OpState>>& ops,
                   Timeline* timeline) = 0;
  // Eager allreduce (cycle_engine.h): the input bytes this rank brings to the negotiation's
  // allgather round for `op`, a small allreduce that every rank can then reduce from the gathered
  // inputs with no collective; empty when `op` cannot run that way (the default).
  virtual std::string_view eager_input(const detail::OpState& /*op*/) { return {}; }
  // Runs `op` from every rank's eager_input() bytes, by rank (the engine checked that each brought
  // its own for this op). Throws StatusError.
  virtual void run_eager(detail::OpState& op, std::span<const std::string_view> inputs,
                         Timeline* timeline);
};
// What a failed op's waiter rethrows: the public error type with `status`.
inline std::exception_ptr op_failure(hvd_status status, const std::string& message) {
  return std::make_exception_ptr(RuntimeError(status, message));
}

// ppoll() on `fds` until one is ready or `wake_at` (nullopt: no limit); false when poll failed
// (errno says why; EINTR is not a failure).
bool poll_until(std::vector<pollfd>& fds, std::optional<Clock::time_point> wake_at);

// Runs one response's ops with `runner` (on the calling thread), then marks them done with its
// outcome and wakes their waiters.
void run_ops(OpRunner& runner, const std::vector<std::shared_ptr<detail::OpState>>& ops,
             Timeline* timeline);
// The same for one op run from the eager inputs of every rank (OpRunner::run_eager).
void run_eager_op(OpRunner& runner, const std::shared_ptr<detail::OpState>& op,
                  std::span<const std::string_view> inputs, Timeline* timeline);

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
  int fd() const { return fd_.get(); }
  int timer_fd() const { return timer_.get(); }
  bool ok() const { return fd_.valid() && timer_.valid(); }
  void notify() {
    const std::uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(fd_.get(), &one, sizeof one);
  }
  // Asks for the batch to go out now; one wake-up however many threads ask before it does.
  void flush() {
    if (!flush_.exchange(true)) notify();
  }
  bool take_flush() { return flush_.exchange(false); }
  void drain() {
    std::uint64_t n;
    [[maybe_unused]] auto r = ::read(fd_.get(), &n, sizeof n);
  }
  // The batching delay: the timer fires `delay` from now (0: disarmed).
  void arm(std::chrono::nanoseconds delay) {
    itimerspec spec{};
    spec.it_value.tv_sec = static_cast<time_t>(delay.count() / 1000000000);
    spec.it_value.tv_nsec = static_cast<long>(delay.count() % 1000000000);
    ::timerfd_settime(timer_.get(), 0, &spec, nullptr);
  }
  void disarm() { arm(std::chrono::nanoseconds(0)); }
  void drain_timer() {
    std::uint64_t n;
    [[maybe_unused]] auto r = ::read(timer_.get(), &n, sizeof n);
  }

 private:
  UniqueFd fd_;
  UniqueFd timer_;
  std::atomic<bool> flush_{false};
};

// The batching delay (HOROVOD_CYCLE_TIME): a submission nobody waits on goes out at most `delay`
// after the first of its batch, when the Wakeup's timer fires; a waiter sends its batch at once.
// Setting a timer that expires before the kernel's next tick reprograms the clock, which is slow
// on a VM (here arm and disarm: 5.4 us at 0.2 ms, 0.4 us at 4 ms; in a 2-rank step of 100 fused
// tensors over TCP, 40-60 us of 680: bench/README.md). In a loop whose batches a waiter takes
// before their delay ends (submit, then wait), that timer never fires: after kStreak such
// batches in a row the first submission of a batch arms the cheap kBackstop instead, and a later
// submission that finds the batch older than `delay` makes it due at once (the engine wakes its
// thread). The first batch that goes out otherwise (the timer, another rank's doorbell, a late
// waiter) ends the streak: a loop that relies on the delay (gradients submitted through a long
// backward pass) has a late batch every step and keeps the short timer. The backstop costs no
// system call per batch: it is armed only when none is pending and left running when a waiter
// takes the batch (each timerfd_settime is a system call, 1.2-1.6 us on the development VM, and a
// synchronous named allreduce paid two: 9.5 us against 5.4-5.9 at 4 KiB, bench/README.md), so in a
// tight loop the timer fires about once per kBackstop, and fired() tells the engine whether a
// batch is due then or re-arms for the batch's own backstop. Not thread-safe: used under the
// engine's queue lock.
class BatchDelay {
 public:
  static constexpr int kStreak = 8;
  static constexpr std::chrono::milliseconds kBackstop{4};
  BatchDelay(Wakeup& wakeup, std::chrono::microseconds delay,
             std::chrono::microseconds backstop = kBackstop)
      : wakeup_(wakeup), delay_(delay), backstop_delay_(backstop) {}
  // A submission nobody waits on yet. True: the batch is due now (a delay of 0, or a batch under
  // the backstop that is older than the delay).
  bool add();
  // The queued batch went out: `waiter` when a thread waiting on an op took it.
  void taken(bool waiter);
  // The timer fired (the engine's thread drained it). True: the queued batch is due. False:
  // nothing is queued (a backstop left running after its batch went out), or the queued batch
  // is younger than its delay (then the timer is armed again for what is left of it).
  bool fired();

 private:
  Wakeup& wakeup_;
  std::chrono::microseconds delay_;
  std::chrono::microseconds backstop_delay_;
  void arm(Clock::time_point now, std::chrono::microseconds delay);

  bool armed_ = false;     // a batch is queued (its delay runs)
  bool backstop_ = false;  // ... under the backstop: later submissions check the delay themselves
  bool due_ = false;       // ... and one found it over
  Clock::time_point since_{};               // the batch's first submission
  std::optional<Clock::time_point> fires_;  // when the timer fires; nullopt: disarmed or fired
  int streak_ = 0;  // batches in a row that a waiter took before their delay ended
};

struct EngineOptions {
  int rank = 0;
  int size = 1;
  ControllerOptions controller;
  std::chrono::microseconds cycle_time = contract::kCycleTime.default_value.as_microseconds();
  Timeline* timeline = nullptr;  // rank 0's (recording or not); outlives the engine
  // Ranks other than 0: how long they wait on pending ops without a word from the coordinator
  // before they fail them with HVD_ERR_PEER_LOST (a frozen rank 0 keeps its connections open:
  // nothing else would end the wait). 0: forever. The coordinator sends a keepalive every
  // kCoordinatorKeepalive while anything waits, so a live but slow job never hits it.
  std::chrono::milliseconds coordinator_timeout{0};
};

// How often the coordinator tells waiting ranks it is alive (an empty ResponseList).
inline constexpr std::chrono::milliseconds kCoordinatorKeepalive{1000};
// What a rank's pending ops fail with when rank 0 has been silent for `silent`
// (EngineOptions::coordinator_timeout).
std::string coordinator_silence(Clock::duration silent, const std::string& waiting_on);

// What the Runtime submits to: Engine (below: requests to rank 0 over the control plane, its
// background thread runs the collectives) or CycleEngine (cycle_engine.h: negotiation cycles on
// the backend's own collectives, under MPI).
class OpEngine {
 public:
  virtual ~OpEngine() = default;
  void submit(const std::shared_ptr<detail::OpState>& op, bool now) { submit_group({&op, 1}, now); }
  // The ops of one group (Request::group; or one op alone), queued together: they reach the
  // coordinator in one batch. Either all are queued or, when one cannot be (a name in flight or
  // twice in `ops`), none is and it throws StatusError.
  virtual void submit_group(std::span<const std::shared_ptr<detail::OpState>> ops, bool now) = 0;
  // A thread waits for `op` until `deadline`: what is batched goes out now. An engine may move
  // the op on in the waiting thread itself until it is done or the deadline passed.
  virtual void wait(detail::OpState& op, Clock::time_point deadline) = 0;
  virtual void shutdown() = 0;
  virtual EngineStats stats() const = 0;
  // The job broke under this rank (a peer lost, a stall shutdown, a negotiation left
  // unfinished): not a normal goodbye. Asked after shutdown().
  virtual bool broken() = 0;
};

class Engine : public OpEngine {
 public:
  // Starts the background thread. `runner` runs the collectives and outlives the engine.
  Engine(OpRunner& runner, ControlPlane control, EngineOptions options);
  ~Engine() override;  // shutdown()
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues `ops` (requests filled in). `now`: the caller will wait for them at once (a
  // synchronous call), so the batch goes out without the cycle time. Throws StatusError if a
  // name is already in flight on this rank or the engine has failed or shut down.
  void submit_group(std::span<const std::shared_ptr<detail::OpState>> ops, bool now) override;

  // Someone waits on a handle: the batch goes out now. On ranks other than 0 the calling thread
  // sends it itself (one thread hand-off less per step); rank 0 wakes the background thread.
  void flush();
  void wait(detail::OpState& /*op*/, Clock::time_point /*deadline*/) override { flush(); }

  // Tells the coordinator this rank is done, fails what is still pending, joins the thread.
  void shutdown() override;
  EngineStats stats() const override;
  bool broken() override {
    std::lock_guard<std::mutex> lock(mutex_);
    return broken_;
  }

 private:
  bool run_once();
  // `waiter`: a thread waiting on an op asked for the batch (BatchDelay::taken).
  void send_batch(Clock::time_point now, bool shutdown, bool waiter);
  // The queued requests; `data`: the input of the one queued op when it alone is queued and can
  // be reduced at the coordinator (OpRunner::eager_input), else empty.
  RequestList take_queue(bool waiter, std::string& data);
  // Ranks other than 0; false: the coordinator is gone.
  bool send_to_coordinator(bool shutdown, bool waiter);
  bool read_network(const std::vector<int>& readable, Clock::time_point now);
  // decode(), or nullopt after failing everything with a message naming rank `from`.
  template <typename Decode>
  auto decode_or_fail(int from, Decode&& decode) -> std::optional<decltype(decode())>;
  void coordinate(Clock::time_point now);
  // The liveness of rank 0 (EngineOptions::coordinator_timeout): when the next turn is due,
  // nullopt when none; check_coordinator fails everything once rank 0 has been silent too long.
  std::optional<Clock::time_point> liveness_due(Clock::time_point now) const;
  bool check_coordinator(Clock::time_point now);
  void execute(const ResponseList& list);
  void run_response(const Response& response);
  // Rank 0: keeps rank `from`'s eager input for the one op of `list` (or notes that its ops came
  // without); reduce_eager() reduces every rank's for `response` when all brought theirs: rank 0's
  // own op done, the result to send with the response (empty: run as a collective).
  void note_eager(int from, const RequestList& list, std::string data);
  std::string reduce_eager(Response& response);
  // The other ranks: the response that came with the coordinator's reduction of the inputs.
  void finish_eager(const ResponseList& list, std::string_view result);
  // Fails every pending and later op with `status` (HVD_ERR_PEER_LOST when a peer is gone).
  void fail_everything(const std::string& why, hvd_status status = HVD_ERR_BACKEND);
  std::vector<std::shared_ptr<detail::OpState>> take_pending(const std::vector<std::string>& names);

  OpRunner& runner_;
  ControlPlane control_;
  EngineOptions options_;
  Wakeup wakeup_;

  // Shared with submitting and waiting threads.
  std::mutex mutex_;
  std::deque<std::shared_ptr<detail::OpState>> queue_;
  std::unordered_set<std::string> in_flight_;
  std::unordered_map<std::string, std::shared_ptr<detail::OpState>> pending_;  // sent, not done
  std::string failed_;  // once set, submissions fail with it (and failed_status_)
  hvd_status failed_status_ = HVD_ERR_BACKEND;
  bool broken_ = false;  // failed otherwise than by hvd::shutdown()
  bool stopping_ = false;
  BatchDelay batch_{wakeup_, options_.cycle_time};  // the queued submissions' batching delay
  std::atomic<std::uint64_t> negotiated_{0};
  std::atomic<std::uint64_t> eager_{0};
  std::atomic<std::uint64_t> responses_{0};

  std::mutex send_mutex_;  // ranks other than 0: the connection to the coordinator

  // The background thread's own.
  std::optional<Controller> controller_;  // rank 0 only
  // Rank 0: eager inputs of tensors not yet decided, by name and rank (note_eager).
  struct EagerInputs {
    std::vector<std::string> by_rank;
    int have = 0;             // ranks whose input is here
    bool incomplete = false;  // a rank brought the tensor without its input
  };
  std::unordered_map<std::string, EagerInputs> eager_inputs_;
  Clock::time_point last_sent_{};   // rank 0: the last message to the other ranks
  Clock::time_point last_heard_{};  // others: the last message from rank 0, or when
                                    // they began waiting
  bool waiting_ = false;            // others: ops were pending at the last turn
  bool stopped_ = false;
  std::thread thread_;
};

}  // namespace hvd::runtime
