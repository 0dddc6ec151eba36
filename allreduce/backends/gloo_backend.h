// Gloo over TCP: the backend of hvdrun's native launch (and of a process started on its own).
//
// The device binds the address hvdrun passed (HVD_ADVERTISE_ADDR), never 0.0.0.0; the context
// connects through a gloo::rendezvous::Store (HttpStore under hvdrun, an in-memory store at size
// 1) with the timeout set first, so a peer that never joins or dies is an error within
// HOROVOD_GLOO_TIMEOUT_SECONDS. A failed context is dead: every later call repeats its error.
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
}  // namespace gloo

namespace hvd::runtime {

struct GlooOptions {
  int rank = 0;
  int size = 1;
  std::string bind_address;  // HVD_ADVERTISE_ADDR
  std::chrono::milliseconds timeout{30000};
  // HOROVOD_GLOO_LOOP_POLICY: the scheduling policy of Gloo's TCP event-loop thread.
  ThreadPolicy loop_policy = ThreadPolicy::kNormal;
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

  GlooOptions options_;
  std::shared_ptr<gloo::Context> context_;
  uint32_t next_tag_ = 0;
  // Marks the context dead and throws the op's StatusError with `status`.
  [[noreturn]] void fail_context(const char* op, const std::string& what, hvd_status status);

  std::optional<std::string> dead_;  // the first failure; the context is unusable after it
  hvd_status dead_status_ = HVD_ERR_BACKEND;
};

}  // namespace hvd::runtime
