// One libhvd runtime: the configuration read at init, the topology and the backend, and the
// collectives' common part (validation, scaling, averaging, size exchange, output allocation).
//
// Thread-safe: each op holds the runtime's mutex, so ops run one at a time, in call order.
// The public free functions (api.cpp) use one process-wide Runtime, as Horovod's hvd.init() does.
#pragma once

#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "allreduce/backend.h"
#include "allreduce/config.h"

namespace hvd::runtime {

class Runtime {
 public:
  explicit Runtime(const RuntimeConfig& config);  // connects the backend; throws StatusError
  ~Runtime();

  const contract::RankTopology& topology() const { return topology_; }
  std::string_view backend_name() const { return backend_->name(); }

  void allreduce(const Tensor& in, const Tensor& out, const AllreduceOptions& options);
  void broadcast(const Tensor& inout, int root);
  void allgather(const Tensor& in, const Allocator& allocate);
  void reducescatter(const Tensor& in, const Allocator& allocate, ReduceOp op);
  std::vector<std::int64_t> alltoall(const Tensor& in, std::span<const std::int64_t> splits,
                                     const Allocator& allocate);
  void barrier();

 private:
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
  contract::RankTopology topology_;
  std::unique_ptr<Backend> backend_;
  std::mutex mutex_;
};

}  // namespace hvd::runtime
