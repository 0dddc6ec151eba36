#include "allreduce/backends/nccl_ops.h"

#include <unistd.h>

#include <fmt/format.h>

#include "allreduce/api/status_error.h"
#include "allreduce/engine/messages.h"
#include "allreduce/kernels/dtype.h"

namespace hvd::runtime {
namespace {

std::string hostname() {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  return name;
}

[[noreturn]] void unsupported(const std::string& what, std::string hint = {}) {
  throw StatusError(HVD_ERR_UNSUPPORTED, what, std::move(hint));
}

const hvd_nccl_plugin& api() { return *gpu_facts().api; }

}  // namespace

void check_gpu_submission(const detail::OpState& op, bool output_in_buffer) {
  const Tensor& t = op.in;
  const char* kind = op_kind_name(op.request.kind);
  // Before the host's facts: no host can do it, so the program is told whatever host it runs on.
  const bool reduces =
      op.request.kind == OpKind::kAllreduce || op.request.kind == OpKind::kReducescatter;
  if (reduces && t.dtype == DataType::kInt16) {
    unsupported(fmt::format("{} of a {}: NCCL has no int16 type, so libhvd cannot reduce int16 "
                            "CUDA tensors",
                            kind, describe(t)),
                "convert the tensor to int32 (or a floating-point type) for the reduction, or "
                "reduce it in host memory");
  }
  const std::string reason = gpu_unavailable_reason(gpu_facts(), hostname());
  if (!reason.empty()) {
    unsupported(fmt::format("{} of a {}: {}", kind, describe(t), reason),
                "run GPU tensors on a host with a CUDA device and NCCL, or copy them to host "
                "memory (hvdrun --check-build says what this host has)");
  }
  if (t.device.id < 0 || t.device.id >= gpu_facts().devices) {
    throw StatusError(HVD_ERR_INVALID_ARGUMENT,
                      fmt::format("{}: CUDA device {} does not exist on this host ({} visible)",
                                  kind, t.device.id, gpu_facts().devices));
  }
  switch (op.request.kind) {
    case OpKind::kAllreduce:
      if (op.options.prescale != 1.0 || op.options.postscale != 1.0) {
        unsupported(fmt::format("allreduce of a {}: prescale/postscale on GPU tensors is not "
                                "supported yet",
                                describe(t)),
                    "scale the tensor yourself, or use ReduceOp::kAverage");
      }
      if (op.output().device != t.device) {
        throw StatusError(HVD_ERR_INVALID_ARGUMENT,
                          "allreduce: the input and the output are on different devices");
      }
      break;
    case OpKind::kBroadcast:
      break;
    case OpKind::kReducescatter:
      if (op.options.prescale != 1.0 || op.options.postscale != 1.0) {
        unsupported(fmt::format("reducescatter of a {}: prescale/postscale on GPU tensors is not "
                                "supported yet",
                                describe(t)),
                    "scale the tensor yourself, or use ReduceOp::kAverage");
      }
      [[fallthrough]];
    case OpKind::kAllgather:
      if (output_in_buffer) {
        unsupported(fmt::format("{} of a {} into an hvd::Buffer (host memory)", kind, describe(t)),
                    "use the form that takes an Allocator, and allocate device memory in it");
      }
      break;
    default:
      unsupported(fmt::format("{} of a {}: not supported on GPU tensors yet", kind, describe(t)),
                  "copy the tensor to host memory");
  }
}

NcclOps::NcclOps(Backend& cpu, const contract::RankTopology& topology,
                 std::chrono::milliseconds timeout)
    : cpu_(cpu), topology_(topology), timeout_(timeout) {}

NcclOps::~NcclOps() {
  for (auto& [device, comm] : comms_) api().comm_destroy(comm);  // an aborted one: freed only
}

void NcclOps::abort() {
  for (auto& [device, comm] : comms_) api().comm_abort(comm);
}

hvd_nccl_comm* NcclOps::comm_for(int device) {
  if (auto it = comms_.find(device); it != comms_.end()) return it->second;
  const NcclUniqueId id = exchange_unique_id(cpu_, topology_.rank, api().unique_id);
  char err[512] = {};
  hvd_nccl_comm* comm =
      api().comm_create(id.data(), topology_.size, topology_.rank, device, err, sizeof err);
  if (comm == nullptr) {
    throw StatusError(
        HVD_ERR_BACKEND,
        fmt::format("creating the NCCL communicator on CUDA device {} failed: {}", device, err));
  }
  comms_.emplace(device, comm);
  return comm;
}

void NcclOps::run(detail::OpState& op) {
  const Tensor& t = op.in;
  const char* kind = op_kind_name(op.request.kind);
  hvd_nccl_comm* comm = comm_for(t.device.id);
  char err[512] = {};
  const int dtype = static_cast<int>(t.dtype);
  const auto count = static_cast<std::size_t>(t.num_elements());
  int rc = 0;
  switch (op.request.kind) {
    case OpKind::kAllreduce:
      rc = api().allreduce(comm, t.data, op.output().data, count, dtype,
                           static_cast<int>(op.options.op), t.stream, err, sizeof err);
      break;
    case OpKind::kBroadcast:
      rc = api().broadcast(comm, t.data, count, dtype, op.request.root, t.stream, err, sizeof err);
      break;
    case OpKind::kAllgather: {
      // NCCL's allgather needs the same count everywhere; the coordinator checked the trailing
      // dimensions, the first must match too on this path.
      std::int64_t rows = t.shape.at(0), max_rows = rows;
      std::vector<std::int64_t> all(static_cast<std::size_t>(topology_.size));
      cpu_.allgatherv(&rows, all.data(),
                      std::vector<std::size_t>(all.size(), sizeof(std::int64_t)));
      for (std::int64_t r : all) {
        if (r != rows) max_rows = -1;
      }
      if (max_rows < 0) {
        unsupported(
            "allgather of CUDA tensors whose first dimension differs between ranks is "
            "not supported yet");
      }
      std::vector<std::int64_t> shape = t.shape;
      shape[0] = rows * topology_.size;
      void* out = op.allocate(shape, count * topology_.size * element_size(t.dtype));
      rc = api().allgather(comm, t.data, out, count, dtype, t.stream, err, sizeof err);
      break;
    }
    case OpKind::kReducescatter: {
      const std::int64_t rows = t.shape.at(0);
      if (rows % topology_.size != 0) {
        unsupported(
            fmt::format("reducescatter of a CUDA tensor with {} rows over {} ranks: NCCL "
                        "needs equal blocks",
                        rows, topology_.size));
      }
      std::vector<std::int64_t> shape = t.shape;
      shape[0] = rows / topology_.size;
      const std::size_t block = count / static_cast<std::size_t>(topology_.size);
      void* out = op.allocate(shape, block * element_size(t.dtype));
      rc = api().reducescatter(comm, t.data, out, block, dtype, static_cast<int>(op.request.op),
                               t.stream, err, sizeof err);
      break;
    }
    default:
      unsupported(fmt::format("{} on GPU tensors", kind));
  }
  if (rc == 0) {
    rc = api().synchronize(comm, t.stream, static_cast<int>(timeout_.count()), err, sizeof err);
  }
  if (rc != 0) {
    throw StatusError(HVD_ERR_BACKEND,
                      fmt::format("{} of a {} failed on NCCL: {}", kind, describe(t), err));
  }
}

}  // namespace hvd::runtime
