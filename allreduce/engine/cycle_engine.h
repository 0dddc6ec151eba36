// The engine under MPI: negotiation in cycles on the backend's own collectives, run by the
// thread that waits for the result whenever one does.
//
// A cycle is one or two small collectives (cycle_transport.h) on a communicator of their own.
// Each rank brings what was submitted on it since its last cycle: a tensor that ran before with
// the same name, dtype, shape, op and device as a slot of the response cache (response_cache.h),
// anything else as a full request. In the steady state of a training loop the first round, a
// bitwise AND of the cache hits as bits, shows that every rank brought the same cached tensors
// and nothing else, and decides the cycle (decide_from_and); otherwise (and for cycles of new
// names, which skip the AND round) an allgather of the contributions follows, and every rank
// feeds all contributions, in rank order, to its own copy
// of the TCP engine's Controller (readiness, validation, fusion: the same messages), so every rank
// decides the same responses, runs them in that order and updates its cache the same way: the
// caches stay the same. What depends on time (stall warnings, the stall shutdown) is rank 0's
// alone; a fatal error it decides reaches the others over the TCP control plane. Cycles follow
// each other in the same order on every rank, so whichever thread holds the driver lock may move
// one on.
//
// A small allreduce that a rank brings alone carries its input in the allgather round (eager
// data, OpRunner::eager_input); when every rank brought the same one so and the cycle decides
// it, every rank reduces the gathered inputs itself (OpRunner::run_eager) and no collective runs.
//
// Who starts a cycle: a thread that waits on an op (at once: a synchronous allreduce costs the
// one small allgather and the allreduce, or the allgather alone when eager; no thread hand-off
// and no TCP round trip), the
// background thread when the batching delay (HOROVOD_CYCLE_TIME) of submissions nobody waits on
// ends, and a rank saying goodbye in hvd::shutdown(). A waiter whose op is still pending after a
// cycle starts the next at once and waits in it ("parked") for the other ranks to bring theirs,
// unless the last cycle brought nothing new from anyone (then it sleeps until a cycle runs its
// op). A rank that started a cycle with something new and waited kDoorbellAfter in it rings the
// others over the TCP control plane (through rank 0); their background threads join with
// whatever they have, so rank 0 hears of every pending tensor (stall warnings) and a rank that
// nobody waits on still runs its ops. The control plane also carries the fatal errors that end
// the job between cycles (a stall shutdown, a rank lost) and, as in the TCP engine, rank 0's
// keepalive while tensors wait, without which a waiting rank fails after
// EngineOptions::coordinator_timeout (a frozen rank 0).
//
// Locks: drive_mutex_ (the transport, the cache, the Controller, the cycle's state; held while
// the agreed collectives run) before ops_mutex_ (the queue and pending ops, taken briefly by
// submitting threads).
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "allreduce/engine/control_plane.h"
#include "allreduce/engine/controller.h"
#include "allreduce/engine/cycle_transport.h"
#include "allreduce/engine/engine.h"
#include "allreduce/engine/response_cache.h"

namespace hvd::runtime {

// How long a rank waits in a cycle it brought something new to before it rings the others.
inline constexpr std::chrono::microseconds kDoorbellAfter{1000};

class CycleEngine : public OpEngine {
 public:
  // Starts the background thread. `runner` runs the collectives and outlives the engine.
  CycleEngine(OpRunner& runner, ControlPlane control, std::unique_ptr<CycleTransport> transport,
              EngineOptions options, std::size_t cache_capacity);
  ~CycleEngine() override;
  CycleEngine(const CycleEngine&) = delete;
  CycleEngine& operator=(const CycleEngine&) = delete;

  void submit_group(std::span<const std::shared_ptr<detail::OpState>> ops, bool now) override;
  void wait(detail::OpState& op, Clock::time_point deadline) override;
  // Says goodbye in a last cycle, fails what is still pending, joins the thread.
  void shutdown() override;
  EngineStats stats() const override;
  bool broken() override;

 private:
  // A waiter in a started cycle polls it without sleeping this long, then naps, each nap twice
  // the last up to kMaxNap: a peer a little behind costs no wake-up, one far behind little CPU.
  // Over TCP Open MPI's non-blocking collectives advance only inside MPI calls: naps between
  // them cost directly (100 x 16 KiB: 1215 us with a 0.1 ms spin, 769 us with 2 ms).
  // For the first kQuietSpin of it the polls follow each other with a pause instruction and no
  // system call; sched_yield() between them after that (a rank sharing its core with the one it
  // waits on lets it run). On the paravirtualized development VM a system call in that spin made
  // the 1 MiB allreduce that followed it 40-70 us slower (bench/README.md, "System calls in the
  // waiter's spin"); the peer that a synchronous call waits for is most often a few us behind.
  static constexpr std::chrono::microseconds kQuietSpin{50};
  static constexpr std::chrono::microseconds kSpin{2000};
  static constexpr std::chrono::microseconds kFirstNap{20};
  static constexpr std::chrono::microseconds kMaxNap{500};
  static CycleSignal doorbell_signal(std::uint64_t cycle);
  // Under ops_mutex_: `op` into ops_ and queue_; false when its name is in flight.
  bool add_op(const std::shared_ptr<detail::OpState>& op);

  enum class Step { kIdle, kWaiting, kDone };  // nothing to move on; cycle not complete; done
  // What a cycle decided, the same on every rank.
  struct Decision {
    ResponseList list;           // what to run, in this order (or the fatal error)
    std::vector<int> shut_down;  // ranks that said goodbye, in this cycle or before
    bool idle = false;           // no rank brought anything new and nothing ran
    bool hits_only = false;      // every rank brought cache hits alone (and one rank some)
    // The allreduce that every rank brought alone with its input (eager data; empty: none), and
    // those inputs by rank (views into the round's contributions, valid until the next round).
    std::string eager;
    std::vector<std::string_view> eager_inputs;
  };
  bool root() const { return options_.rank == 0; }
  // One turn under drive_mutex_: starts a cycle if there is a reason, moves a started one on.
  Step step(Clock::time_point now, bool waiter);
  bool want_cycle(bool waiter);
  void post(Clock::time_point now, bool waiter);  // waiter: a waiting thread starts it
  // true: the cycle completed and its responses ran; false: not yet, or the transport failed
  // (then the cycles ended: ended_).
  bool progress(Clock::time_point now);
  bool progress_cycle(Clock::time_point now);  // progress() but for the transport's failures
  Decision decide(const std::vector<std::string>& contributions, Clock::time_point now);
  std::optional<Decision> decide_from_and(const std::vector<std::uint64_t>& anded);
  void finish(const Decision& decision);
  void run_response(const Response& response, const Decision& decision);
  // hvd::join: a joined rank's part of an allreduce the others submitted, zeros of its shape.
  static std::shared_ptr<detail::OpState> zero_op(Request request);
  // The allreduce each rank's contribution brought alone with its eager data (empty: none).
  std::string eager_name(const CycleContribution& c) const;
  void ring(Clock::time_point now);
  void end_cycles(const std::string& fatal, hvd_status status);
  // Rank 0: sends every other rank the job's fatal error on the control plane (a CycleSignal),
  // which ends their cycles with it; nothing on the other ranks.
  void tell_ranks(const std::string& fatal, hvd_status status);

  void run_thread();
  bool run_once();
  void read_signals(int from);
  void on_doorbell(int from, std::uint64_t cycle);
  void check_stalls(Clock::time_point now);
  std::optional<Clock::time_point> liveness_due(Clock::time_point now);
  void check_liveness(Clock::time_point now);
  void say_goodbye();
  void fail_everything(const std::string& why, hvd_status status);

  OpRunner& runner_;
  ControlPlane control_;
  EngineOptions options_;
  Wakeup wakeup_;

  // ops_mutex_: shared with submitting and waiting threads.
  std::mutex ops_mutex_;
  struct InFlight {
    std::shared_ptr<detail::OpState> op;
    bool announced = false;  // in a cycle (else still in queue_)
    // The response cache slot it hit when announced (ResponseCache::kNoSlot: a miss): where the
    // cache looks first when it runs.
    std::uint32_t cache_slot = ResponseCache::kNoSlot;
  };
  // Keyed by a view of the op's own name (op->request.name, fixed once submitted): no copy of
  // the name per submission.
  using OpsByName = std::unordered_map<std::string_view, InFlight>;
  OpsByName ops_;  // every op submitted and not finished
  // Nodes of ops_ that finished, reused by submit() (at most kSpareNodes): no allocation and no
  // free per op in a steady training loop.
  static constexpr std::size_t kSpareNodes = 4096;
  std::vector<OpsByName::node_type> spare_;
  std::vector<InFlight*> queue_;  // in ops_, not yet in a cycle, in order
  std::string failed_;            // once set, submissions fail with it
  hvd_status failed_status_ = HVD_ERR_BACKEND;
  std::string gone_;  // "rank(s) 1 already shut down": later submissions fail with it
  bool stopping_ = false;
  BatchDelay batch_{wakeup_, options_.cycle_time};  // the queued submissions' batching delay
  bool due_ = false;  // the batching delay ended, or a submission nobody waits on wants a cycle

  // drive_mutex_: whoever moves the cycles on.
  std::mutex drive_mutex_;
  std::unique_ptr<CycleTransport> transport_;
  ResponseCache cache_;
  Controller controller_;  // every rank decides every cycle from the same contributions
  std::optional<Clock::time_point> stall_armed_;  // rank 0: when the background thread looks
  std::uint64_t cycle_ = 0;                       // cycles completed
  // The started cycle is in its AND round (cache hits as bits); contribution_ is this rank's
  // full contribution, for the allgather round if the AND round does not decide the cycle.
  bool and_round_ = false;
  std::string contribution_;
  std::size_t contribution_data_ = 0;  // of which bytes of eager data
  // post()'s and run_response()'s working lists, kept for their capacity.
  std::vector<std::uint32_t> hits_buf_;
  std::vector<const Request*> misses_buf_;
  std::vector<std::shared_ptr<detail::OpState>> run_ops_;
  std::vector<std::uint32_t> run_slots_;
  // The next cycle starts with the AND round: the last one was decided by its AND round, or
  // brought cache hits alone. (Cycles of new names, such as the synchronous ops' automatic
  // ones, go straight to the allgather: an AND round first would only add a collective.)
  bool try_and_ = false;
  bool posted_ = false;  // cycle_ + 1 is started
  Clock::time_point posted_at_{};
  bool brought_new_ = false;  // this rank's part of the started cycle has something new
  bool parked_ = false;       // a waiter started it with nothing new, to wait for the others
  std::string posted_first_;  // the first tensor this rank brought to it (messages)
  Clock::time_point cycle_warned_{};  // rank 0: the last warning about a cycle not joined
  // Rank 0: when each rank's engine last said something (a doorbell, or its answer to one), and
  // when rank 0 last rang (rung_for_: for which cycle).
  std::vector<Clock::time_point> last_seen_;
  Clock::time_point rung_at_{};
  std::uint64_t rung_for_ = 0;
  bool rang_ = false;
  bool last_idle_ = false;      // the last cycle brought nothing new from anyone
  bool ended_ = false;          // no more cycles: a rank shut down, or the job failed
  bool broken_ = false;         // the job failed (end_cycles), not a goodbye
  bool said_goodbye_ = false;   // this rank's goodbye is in a started or finished cycle
  std::uint64_t doorbell_ = 0;  // a rank waits in cycle number doorbell_ (cycle_ + 1 when started)
  std::uint64_t relayed_ = 0;   // rank 0: the last doorbell passed on
  Clock::time_point last_sent_{};      // rank 0: the last keepalive
  Clock::time_point last_heard_{};     // others: the last word from rank 0, or when the wait began
  bool waiting_ = false;               // others: announced ops were pending at the last look
  std::atomic<bool> driving_{false};   // mirrors posted_ for the background thread's poll timeout
  std::atomic<int> waiters_{0};        // threads in wait() polling a cycle (not asleep on their op)
  std::chrono::microseconds nap_{20};  // the background thread's, between polls of a cycle

  std::atomic<std::uint64_t> cycles_{0}, hits_{0}, negotiated_{0}, doorbells_{0},
      decided_by_bits_{0}, eager_{0}, responses_{0};
  std::thread thread_;
};

}  // namespace hvd::runtime
