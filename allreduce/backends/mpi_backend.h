// Open MPI: the backend under mpirun (and `hvdrun --mpi`).
//
// Initialises MPI with MPI_THREAD_MULTIPLE (warns when the library gives less) unless the
// program already did, works on a duplicate of MPI_COMM_WORLD so its messages never mix with the
// program's own MPI traffic, and finalises only what it initialised. float16 and bfloat16 travel
// as 16-bit words reduced by user-defined MPI ops (kernels.h). Errors return (MPI_ERRORS_RETURN)
// and become StatusErrors naming the op and MPI's message.
#pragma once

#include <mpi.h>

#include <array>

#include "allreduce/backends/backend.h"
#include "contract/topology.h"

namespace hvd::runtime {

class MpiBackend : public Backend {
 public:
  MpiBackend();
  // A process set's backend: a communicator of MPI_COMM_WORLD's ranks `world_ranks` (sorted;
  // MPI_Comm_create_group, so only those ranks call it, each with the same `tag`, one per set).
  // MPI must be initialised (the global set's backend did it); never finalises it.
  MpiBackend(const std::vector<int>& world_ranks, int tag);
  ~MpiBackend() override;

  // Rank and size from MPI; local rank/size from OMPI_COMM_WORLD_LOCAL_* (else the shared-memory
  // split); cross rank/size from a split by local rank, as Horovod does.
  contract::RankTopology topology() const { return topology_; }

  std::string_view name() const override { return "mpi"; }
  void allreduce(void* data, std::size_t count, DataType dtype, ReduceOp op) override;
  void allreduce_into(const void* in, void* out, std::size_t count, DataType dtype,
                      ReduceOp op) override;
  void broadcast(void* data, std::size_t bytes, int root) override;
  void allgatherv(const void* in, void* out,
                  const std::vector<std::size_t>& bytes_per_rank) override;
  void alltoallv(const void* in, const std::vector<std::size_t>& send_bytes, void* out,
                 const std::vector<std::size_t>& recv_bytes) override;
  void reducescatter(const void* in, void* out, const std::vector<std::size_t>& counts,
                     DataType dtype, ReduceOp op) override;
  void barrier() override;
  std::unique_ptr<CycleTransport> cycle_transport() override;  // mpi_cycle_transport.cpp
  void abandon() override;
  // Every rank on this host (local size = size) and Open MPI's shared-memory transport not left
  // out (its `btl` and `btl_base_exclude` parameters, read through the MPI tool interface).
  bool shared_memory() const override { return shared_memory_; }

 private:
  MPI_Op op_for(DataType dtype, ReduceOp op) const;
  void compute_topology(bool world);
  void create_half_ops();

  bool abandoned_ = false;  // the job broke: nothing collective at teardown
  bool shared_memory_ = false;
  MPI_Comm comm_ = MPI_COMM_NULL;
  contract::RankTopology topology_;
  // User ops for the 16-bit floats: [bfloat16?][sum, min, max, product].
  std::array<std::array<MPI_Op, 4>, 2> half_ops_{};
};

}  // namespace hvd::runtime
