// Collectives on CUDA tensors through the NCCL plugin (gpu.h): allreduce (ncclAvg for average),
// broadcast, allgather and reducescatter, queued on the tensor's stream; the engine's thread then
// waits for the stream (polling NCCL's asynchronous error, so a failed peer aborts the
// communicator instead of hanging), and the handle completes when the data is ready.
//
// Communicators are created on first use, one per local device: rank 0 makes the NCCL unique id
// and the CPU backend broadcasts it (the control plane), so every rank must reach its first GPU op
// at the same point, which the engine's agreed order guarantees.
#pragma once

#include <map>
#include <string>

#include "allreduce/backends/backend.h"
#include "allreduce/backends/gpu.h"
#include "allreduce/engine/op_state.h"
#include "contract/topology.h"

namespace hvd::runtime {

// Throws StatusError when `op` (a CUDA tensor's op) cannot run here: no plugin, no device, an op
// or option the GPU path does not do. Called at submit, on the caller's thread.
void check_gpu_submission(const detail::OpState& op, bool output_in_buffer);

class NcclOps {
 public:
  NcclOps(Backend& cpu, const contract::RankTopology& topology, std::chrono::milliseconds timeout);
  ~NcclOps();
  // Aborts every communicator (ncclCommAbort): a world whose peer died is left without waiting.
  void abort();
  NcclOps(const NcclOps&) = delete;
  NcclOps& operator=(const NcclOps&) = delete;

  // Runs one op on the engine's thread; throws StatusError naming the op and NCCL's message.
  void run(detail::OpState& op);

 private:
  hvd_nccl_comm* comm_for(int device);

  Backend& cpu_;
  contract::RankTopology topology_;
  std::chrono::milliseconds timeout_;
  std::map<int, hvd_nccl_comm*> comms_;  // by local device
};

}  // namespace hvd::runtime
