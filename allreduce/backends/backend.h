// The engine a Runtime runs its collectives on for host buffers (MPI, Gloo). Device buffers go
// to NCCL, through the plugin (nccl_ops.h), not through a Backend.
//
// A Backend sees only host buffers, element counts and byte counts: validation, scaling, the
// average, output allocation and size exchange happen once above it, in runtime.cpp. Every call
// is a collective: all ranks make the same calls in the same order. Calls come from one thread at
// a time. Failures throw StatusError naming the engine and the op; after an engine failure the
// backend may refuse further calls (a failed Gloo context is dead).
#pragma once

#include <cstddef>
#include <cstring>
#include <memory>
#include <string_view>
#include <vector>

#include "allreduce/engine/cycle_transport.h"
#include "hvd/hvd.hpp"

namespace hvd::runtime {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;

  // In place: data = reduction over ranks. op is kSum, kMin, kMax or kProduct.
  virtual void allreduce(void* data, std::size_t count, DataType dtype, ReduceOp op) = 0;
  // Out of place: out = reduction over ranks of in (in is left alone). The engines take both
  // buffers; this default copies and reduces in place.
  virtual void allreduce_into(const void* in, void* out, std::size_t count, DataType dtype,
                              ReduceOp op) {
    std::memcpy(out, in, count * element_size(dtype));
    allreduce(out, count, dtype, op);
  }
  // In place: root's `bytes` bytes to every rank.
  virtual void broadcast(void* data, std::size_t bytes, int root) = 0;
  // Rank r contributes bytes_per_rank[r] bytes; out holds the concatenation in rank order.
  virtual void allgatherv(const void* in, void* out,
                          const std::vector<std::size_t>& bytes_per_rank) = 0;
  // send_bytes[r] bytes (consecutive, in rank order) go to rank r; recv_bytes[r] come from r.
  virtual void alltoallv(const void* in, const std::vector<std::size_t>& send_bytes, void* out,
                         const std::vector<std::size_t>& recv_bytes) = 0;
  // Reduce `in` (sum of counts elements) across ranks; rank r keeps block r of counts[r]
  // elements in out. op is kSum.
  virtual void reducescatter(const void* in, void* out, const std::vector<std::size_t>& counts,
                             DataType dtype, ReduceOp op) = 0;
  virtual void barrier() = 0;

  // The collectives of the engine's negotiation cycles (cycle_engine.h), on a communicator of
  // their own; nullptr when the backend has none (Gloo: the engine negotiates over its control
  // plane instead).
  virtual std::unique_ptr<CycleTransport> cycle_transport() { return nullptr; }
  // Every rank reaches every other through shared memory (one host, and the backend uses it):
  // small messages cost a few microseconds rather than a network round trip.
  virtual bool shared_memory() const { return false; }
  // The job broke (a peer is lost): tear down without anything that waits for the other ranks
  // (MPI: no MPI_Finalize, which is collective).
  virtual void abandon() {}
};

// Open MPI's byte transfer layers as its MCA parameters `btl` ("^openib,ofi": all but those;
// "tcp,self": only those; empty: all) and `btl_base_exclude` leave them: true when the
// shared-memory one (vader, formerly sm) is among them.
inline bool open_mpi_btl_shared_memory(std::string_view btl, std::string_view exclude) {
  const auto names = [](std::string_view list, std::string_view name) {
    while (!list.empty()) {
      const std::size_t comma = list.find(',');
      if (list.substr(0, comma) == name) return true;
      list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
    }
    return false;
  };
  const auto shm = [&](std::string_view list) { return names(list, "vader") || names(list, "sm"); };
  if (shm(exclude)) return false;
  if (btl.empty()) return true;
  if (btl.front() == '^') return !shm(btl.substr(1));
  return shm(btl);
}

}  // namespace hvd::runtime
