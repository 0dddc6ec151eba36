// One libhvd runtime: the configuration read at init, the topology, the backend, the engine, and
// the collectives' common part (validation, scaling, averaging, size exchange, fusion buffer,
// output allocation).
//
// Callers submit() ops from any thread; the engine's background thread negotiates them and calls
// run(), so the backend only ever sees that one thread. The public free functions (api.cpp) use
// one process-wide Runtime, as Horovod's hvd.init() does.
#pragma once

#include <array>
#include <atomic>
#include <memory>
#include <span>
#include <vector>

#include "allreduce/backends/backend.h"
#include "allreduce/engine/engine.h"
#include "allreduce/engine/timeline.h"
#include "allreduce/runtime/config.h"

namespace hvd::runtime {

class NcclOps;

// The timeline while one response's ops run (Horovod's layout): their QUEUE phase ends and the
// op's own phase ("ALLREDUCE") begins; it ends, with the output's dtype and shape, when this is
// destroyed, however the run ends. timeline() is the timeline, or null when it does not record.
class OpsInTimeline {
 public:
  OpsInTimeline(Timeline* timeline, const std::vector<std::shared_ptr<detail::OpState>>& ops);
  OpsInTimeline(Timeline* timeline, const detail::OpState& op);
  ~OpsInTimeline();
  OpsInTimeline(const OpsInTimeline&) = delete;
  OpsInTimeline& operator=(const OpsInTimeline&) = delete;
  Timeline* timeline() const { return timeline_; }

 private:
  void begin();
  Timeline* timeline_;
  std::vector<const detail::OpState*> ops_;
};

// Which ranks a Runtime spans: the whole job (the global set, id 0), or a process set, whose
// Runtime has a backend (a Gloo context, an MPI communicator), control plane and engine of its
// own among its ranks, numbered 0..n-1 in the order of their global ranks.
struct SetSpec {
  int id = 0;
  std::vector<int> ranks;         // global ranks, sorted; empty for the global set
  contract::RankTopology parent;  // the global set's topology (this process's global rank)
  // Sets made in this process's runtime before this one, the same count on every rank (every
  // rank takes part in every add): the part of its Gloo rendezvous scope and MPI tag that no
  // other set of this runtime has.
  int serial = 0;
  // Global rank 0's timeline, which a set that has rank 0 records into (Timeline's view of a
  // set); null elsewhere.
  std::shared_ptr<Timeline> timeline;
  std::string label() const;  // "process set 1 (ranks 0, 2)"
};

class Runtime final : public OpRunner {
 public:
  // Connects the backend and the engine's control plane; throws StatusError. With a `set`
  // (id > 0), among that set's ranks only: called by each of them, never by the others.
  explicit Runtime(const RuntimeConfig& config, SetSpec set = {});
  ~Runtime();  // stops the engine first
  // An elastic reset leaves this world because a peer was lost: its NCCL communicators are
  // aborted at destruction instead of destroyed (ncclCommDestroy may wait for the dead peer).
  void abandon() { abandoned_ = true; }

  // rank and size are the set's (topology_.rank is this process's rank inside it).
  const contract::RankTopology& topology() const { return topology_; }
  const SetSpec& set() const { return set_; }
  std::string_view backend_name() const { return backend_->name(); }

  // Checks what this rank alone can check (throws StatusError at once), then queues the op;
  // `now`: a synchronous call that waits at once (see Engine::submit).
  void submit(const std::shared_ptr<detail::OpState>& op, bool now) { submit_group({&op, 1}, now); }
  // The ops of one grouped call named `group` (hvd::grouped_allreduce_async, ...): one kind, one
  // device, named "<group>_<i>of<n>" already; each checked as submit() checks it, then made one
  // group (Request::group) and queued together. An empty `group`: ops in no group.
  void submit_group(std::span<const std::shared_ptr<detail::OpState>> ops, bool now,
                    std::string_view group = {});
  // A thread waits on `op` until `deadline` (see OpEngine::wait). Never throws.
  void wait(detail::OpState& op, Clock::time_point deadline);
  EngineStats engine_stats() const { return engine_->stats(); }
  // hvd::join(): false when a join already waits on this rank; throws StatusError where the
  // engine cannot join (the TCP engine: its coordinator sends names, not what to add zeros to).
  bool start_join();
  void end_join() { joining_ = false; }
  // "hvd.allreduce.3": names for the synchronous calls, the same sequence on every rank.
  std::string auto_name(OpKind kind);
  // hvd::start_timeline / stop_timeline: rank 0 records (Timeline); the others check the path.
  void start_timeline(const std::string& path, bool mark_cycles);
  void stop_timeline();
  // The global set's rank 0: its timeline, for the process sets it makes (SetSpec::timeline).
  const std::shared_ptr<Timeline>& timeline() const { return timeline_; }

  // The engine's thread: runs one response's ops (several: a fused allreduce or broadcast).
  void run(const std::vector<std::shared_ptr<detail::OpState>>& ops, Timeline* timeline) override;
  // Eager allreduce (cycle_engine.h): a host-memory allreduce of at most eager_bytes_, with no
  // prescale, whose reduction libhvd's own kernels do; run_eager() reduces the gathered inputs in
  // rank order, so every rank computes the same bits.
  std::string_view eager_input(const detail::OpState& op) override;
  void run_eager(detail::OpState& op, std::span<const std::string_view> inputs,
                 Timeline* timeline) override;

 private:
  void allreduce(const Tensor& in, const Tensor& out, const AllreduceOptions& options);
  void allreduce_fused(const std::vector<std::shared_ptr<detail::OpState>>& ops,
                       Timeline* timeline);
  // A group's allreduces (one response whatever their size or dtypes): fused per dtype, in
  // batches of at most the fusion threshold.
  void allreduce_group(const std::vector<std::shared_ptr<detail::OpState>>& ops,
                       Timeline* timeline);
  void broadcast_fused(const std::vector<std::shared_ptr<detail::OpState>>& ops,
                       Timeline* timeline);
  void broadcast(const Tensor& inout, int root);
  void allgather(const Tensor& in, const Allocator& allocate);
  void reducescatter(const Tensor& in, const Allocator& allocate, const AllreduceOptions& options);
  std::vector<std::int64_t> alltoall(const Tensor& in, std::span<const std::int64_t> splits,
                                     const Allocator& allocate);
  void run_one(detail::OpState& op);

  // Every rank's dtype and shape (one small allgather), for checks and output sizes.
  struct ShapeRecord {
    DataType dtype;
    std::vector<std::int64_t> shape;
  };
  std::vector<ShapeRecord> exchange_shapes(const Tensor& t);
  void check_same_trailing(const char* op, const std::vector<ShapeRecord>& shapes);
  void* allocate_output(const char* op, const Allocator& allocate,
                        const std::vector<std::int64_t>& shape, std::size_t bytes);
  void finish_average(void* data, std::size_t count, DataType dtype);

  RuntimeConfig config_;
  SetSpec set_;
  contract::RankTopology topology_;
  std::unique_ptr<Backend> backend_;
  std::vector<std::byte> fusion_buffer_;  // reused; grows up to the fusion threshold
  std::size_t eager_bytes_ = 0;           // HOROVOD_EAGER_BYTES as chosen at init
  std::array<std::atomic<long long>, 7> name_counters_{};
  std::unique_ptr<NcclOps> nccl_;  // on the first CUDA tensor's op
  bool abandoned_ = false;
  std::atomic<bool> joining_{false};
  // Rank 0's, recording or not (a set's: a view of the global set's); null on other ranks.
  std::shared_ptr<Timeline> timeline_;
  std::unique_ptr<OpEngine> engine_;  // last: stopped before everything above
};

}  // namespace hvd::runtime
