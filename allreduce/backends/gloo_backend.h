// Gloo over TCP: the backend of hvdrun's native launch (and of a process started on its own).
//
// The device binds the address hvdrun passed (HVD_ADVERTISE_ADDR), never 0.0.0.0; the context
// connects through a gloo::rendezvous::Store (HttpStore under hvdrun, an in-memory store at size
// 1) with the timeout set first, so a peer that never joins or dies is an error within
// HOROVOD_GLOO_TIMEOUT_SECONDS. A failed context is dead: every later call repeats its error.
//
// Allreduces of up to HOROVOD_GLOO_SYNC_BYTES (4 MiB) do not go through gloo::allreduce but
// through Gloo's halving-doubling algorithm (gloo::AllreduceHalvingDoubling) on a second context
// whose pairs are in Gloo's synchronous mode: the calling thread writes and reads the sockets
// itself, where gloo::allreduce waits for Gloo's event-loop thread to read each message and wake
// it (two thread wake-ups per message; on the development VM a 256 KiB allreduce took 880-910 us
// that way against 90-140 us; bench/README.md, "Gloo's synchronous mode"). A synchronous write
// blocks until the socket takes the whole message, so both ranks of a pair writing at once must
// each fit their send buffer: the allreduce runs in pieces of at most HOROVOD_GLOO_SYNC_PIECE_BYTES
// (net.core.wmem_max, which Gloo's send buffer request is capped at and the kernel doubles).
// Gloo's ring (gloo::AllreduceRing) deadlocked in synchronous mode on 2 ranks; halving-doubling
// is what libhvd runs there, and only there. A failed context resets these connections at once
// (fail_context): a peer blocked reading from this rank fails then, not after the timeout.
//
// Gloo has no reduce-scatter in this version: it is an allreduce of the whole buffer followed by
// keeping this rank's block (twice the traffic of a ring reduce-scatter; said in docs/libhvd.md).
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "allreduce/backends/backend.h"
#include "common/thread_policy.h"

namespace gloo {
class Context;
namespace rendezvous {
class Store;
}
namespace transport {
class Device;
}
}  // namespace gloo

namespace hvd::runtime {

struct GlooOptions {
  int rank = 0;
  int size = 1;
  std::string bind_address;  // HVD_ADVERTISE_ADDR
  std::chrono::milliseconds timeout{30000};
  // HOROVOD_GLOO_LOOP_POLICY: the scheduling policy of Gloo's TCP event-loop thread.
  ThreadPolicy loop_policy = ThreadPolicy::kNormal;
  // HOROVOD_GLOO_SYNC_BYTES (0: every allreduce through gloo::allreduce) and
  // HOROVOD_GLOO_SYNC_PIECE_BYTES (-1: net.core.wmem_max).
  std::size_t sync_bytes = 4u << 20;
  long long sync_piece_bytes = -1;
};

class GlooBackend : public Backend {
 public:
  // Connects the full mesh through `store`; throws StatusError (timeout, refused token, ...).
  GlooBackend(const GlooOptions& options, gloo::rendezvous::Store& store,
              const std::string& store_name);
  ~GlooBackend() override;

  std::string_view name() const override { return "gloo"; }
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

 private:
  // Runs `body` (one Gloo call); a Gloo exception becomes a StatusError naming `op` and kills
  // the context for later calls.
  template <class Body>
  void guarded(const char* op, Body&& body);

  // Connects a context through `store` (the constructor's errors).
  std::shared_ptr<gloo::Context> connect(gloo::rendezvous::Store& store,
                                         const std::string& store_name,
                                         std::shared_ptr<gloo::transport::Device>& device);
  // Halving-doubling on sync_context_, in pieces of at most sync_piece_bytes_.
  void sync_allreduce(void* data, std::size_t count, DataType dtype, ReduceOp op);

  GlooOptions options_;
  std::shared_ptr<gloo::Context> context_;
  // The pairs in Gloo's synchronous mode (null at size 1 or with HOROVOD_GLOO_SYNC_BYTES=0).
  std::shared_ptr<gloo::Context> sync_context_;
  std::size_t sync_piece_bytes_ = 0;
  uint32_t next_tag_ = 0;
  // Marks the context dead and throws the op's StatusError with `status`.
  [[noreturn]] void fail_context(const char* op, const std::string& what, hvd_status status);

  std::optional<std::string> dead_;  // the first failure; the context is unusable after it
  hvd_status dead_status_ = HVD_ERR_BACKEND;
};

}  // namespace hvd::runtime
