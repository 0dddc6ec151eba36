// The public C++ API (hvd/hvd.hpp) over one process-wide Runtime.
#include <fmt/format.h>

#include <cstdlib>
#include <memory>
#include <mutex>

#include "allreduce/boundary.h"
#include "allreduce/runtime.h"
#include "hvd/build_config.h"
#include "hvd/hvd.hpp"

namespace hvd {
namespace {

using runtime::Runtime;

// The one global libhvd has, because Horovod's API is hvd::init() with no object: the current
// runtime, shared so that an op in flight on another thread keeps it alive through shutdown().
struct Process {
  std::mutex mutex;
  std::shared_ptr<Runtime> runtime;
  bool shut_down = false;
};

Process& process() {
  static Process p;
  return p;
}

std::shared_ptr<Runtime> current(const char* call) {
  Process& p = process();
  std::lock_guard<std::mutex> lock(p.mutex);
  if (!p.runtime) {
    throw RuntimeError(HVD_ERR_NOT_INITIALIZED,
                       p.shut_down ? fmt::format("hvd::{}() called after hvd::shutdown()", call)
                                   : fmt::format("hvd::{}() called before hvd::init()", call));
  }
  return p.runtime;
}

}  // namespace

RuntimeError::RuntimeError(hvd_status status, const std::string& message)
    : std::runtime_error(message), status_(status) {}

void init() {
  runtime::at_boundary([] {
    Process& p = process();
    std::lock_guard<std::mutex> lock(p.mutex);
    if (p.runtime) return;
    const auto config =
        runtime::read_config([](const char* name) { return std::getenv(name); },
                             runtime::BuildFacts{.has_mpi = HVD_BUILD_HAS_MPI != 0,
                                                 .has_gloo = HVD_BUILD_HAS_GLOO != 0});
    p.runtime = std::make_shared<Runtime>(config);
    p.shut_down = false;
  });
}

void shutdown() {
  std::shared_ptr<Runtime> last;
  {
    Process& p = process();
    std::lock_guard<std::mutex> lock(p.mutex);
    if (!p.runtime) return;
    last = std::move(p.runtime);
    p.shut_down = true;
  }
  // `last` is destroyed here, or by the last op still running on another thread.
}

bool is_initialized() {
  Process& p = process();
  std::lock_guard<std::mutex> lock(p.mutex);
  return p.runtime != nullptr;
}

int rank() { return current("rank")->topology().rank; }
int size() { return current("size")->topology().size; }
int local_rank() { return current("local_rank")->topology().local_rank; }
int local_size() { return current("local_size")->topology().local_size; }
int cross_rank() { return current("cross_rank")->topology().cross_rank; }
int cross_size() { return current("cross_size")->topology().cross_size; }
std::string backend_name() { return std::string(current("backend_name")->backend_name()); }

void allreduce(const Tensor& in, const Tensor& out, const AllreduceOptions& options) {
  auto rt = current("allreduce");
  runtime::at_boundary([&] { rt->allreduce(in, out, options); });
}

void broadcast(const Tensor& inout, int root) {
  auto rt = current("broadcast");
  runtime::at_boundary([&] { rt->broadcast(inout, root); });
}

void allgather(const Tensor& in, const Allocator& allocate) {
  auto rt = current("allgather");
  runtime::at_boundary([&] { rt->allgather(in, allocate); });
}

namespace {
// An Allocator that fills `buffer` (shape and bytes) for the Buffer-returning overloads.
Allocator into(Buffer& buffer, DataType dtype) {
  buffer.dtype = dtype;
  return [&buffer](const std::vector<std::int64_t>& shape, std::size_t bytes) -> void* {
    buffer.shape = shape;
    buffer.bytes.resize(bytes);
    return buffer.bytes.data();
  };
}
}  // namespace

Buffer allgather(const Tensor& in) {
  Buffer out;
  allgather(in, into(out, in.dtype));
  return out;
}

void reducescatter(const Tensor& in, const Allocator& allocate, ReduceOp op) {
  auto rt = current("reducescatter");
  runtime::at_boundary([&] { rt->reducescatter(in, allocate, op); });
}

Buffer reducescatter(const Tensor& in, ReduceOp op) {
  Buffer out;
  reducescatter(in, into(out, in.dtype), op);
  return out;
}

std::vector<std::int64_t> alltoall(const Tensor& in, std::span<const std::int64_t> splits,
                                   const Allocator& allocate) {
  auto rt = current("alltoall");
  return runtime::at_boundary([&] { return rt->alltoall(in, splits, allocate); });
}

AlltoallResult alltoall(const Tensor& in, std::span<const std::int64_t> splits) {
  AlltoallResult result;
  result.received_splits = alltoall(in, splits, into(result.output, in.dtype));
  return result;
}

void barrier() {
  auto rt = current("barrier");
  runtime::at_boundary([&] { rt->barrier(); });
}

}  // namespace hvd
