// The Runtime's collectives: submission, the engine's run() of a response (one op, a fused
// allreduce or broadcast, or GPU ops through NCCL) and each collective's common part (validation,
// scaling, averaging, size exchange, fusion buffer, output allocation). Start and stop are in
// runtime_init.cpp, eager allreduces in runtime_eager.cpp.
#include "allreduce/runtime/runtime.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <cstring>

#include "allreduce/api/status_error.h"
#include "allreduce/backends/nccl_ops.h"
#include "allreduce/engine/cycle_engine.h"
#include "allreduce/kernels/dtype.h"
#include "allreduce/kernels/kernels.h"
#include "allreduce/runtime/checks.h"

namespace hvd::runtime {
namespace {

std::size_t to_size(std::int64_t n) { return static_cast<std::size_t>(n); }

std::int64_t trailing_elements(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (std::size_t i = 1; i < shape.size(); ++i) n *= shape[i];
  return n;
}

}  // namespace

bool Runtime::start_join() {
  if (dynamic_cast<CycleEngine*>(engine_.get()) == nullptr) {
    throw StatusError(HVD_ERR_UNSUPPORTED,
                      "hvd::join() needs libhvd's negotiation cycles, which this job turned off "
                      "(HOROVOD_GLOO_CYCLES=0 or HOROVOD_MPI_CYCLES=0)",
                      "unset that variable (1, the cycles, is the default)");
  }
  return !joining_.exchange(true);
}

std::string Runtime::auto_name(OpKind kind) {
  return automatic_name(kind, name_counters_[static_cast<std::size_t>(kind)]++);
}

void Runtime::submit_group(std::span<const std::shared_ptr<detail::OpState>> ops, bool now,
                           std::string_view group) {
  for (const auto& op : ops) {
    Request& q = op->request;
    check_submission(*op, topology_.size);
    if (op->in.device.kind == Device::Kind::kCUDA) check_gpu_submission(*op, op->output_in_buffer);
    q.dtype = op->in.dtype;
    q.device = op->in.device;
    q.shape = op->in.shape;
    if (q.kind == OpKind::kAllreduce || q.kind == OpKind::kReducescatter) {
      q.op = op->options.op;
      q.prescale = op->options.prescale;
      q.postscale = op->options.postscale;
    }
  }
  if (!group.empty() && !ops.empty()) {
    const Request& first = ops.front()->request;
    for (const auto& op : ops) {
      if (op->request.device != first.device) {
        invalid(fmt::format("grouped {} '{}': tensor '{}' is on {} and tensor '{}' on {}",
                            op_kind_name(first.kind), group, first.name, describe(ops.front()->in),
                            op->request.name, describe(op->in)),
                "a group's tensors must all be on one device");
      }
    }
    const std::uint64_t id = group_id(first.kind, group);
    for (const auto& op : ops) {
      op->request.group = id;
      op->request.group_size = static_cast<std::uint32_t>(ops.size());
    }
  }
  engine_->submit_group(ops, now);
}

void Runtime::wait(detail::OpState& op, Clock::time_point deadline) {
  try {
    engine_->wait(op, deadline);
  } catch (...) {
    // The engine fails its ops with what went wrong; the waiter finds it there.
  }
}

namespace {
std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

// "GLOO_ALLREDUCE": the timeline's name for the collective itself; empty without a timeline
// (no string formatted per collective when nothing records it).
std::string collective_phase(const Timeline* timeline, std::string_view backend, OpKind kind) {
  if (timeline == nullptr) return {};
  return upper(fmt::format("{}_{}", backend, op_kind_name(kind)));
}

// Timeline phases for every op of a fused response.
void phase(Timeline* timeline, const std::vector<std::shared_ptr<detail::OpState>>& ops,
           const std::string& name, bool begin) {
  if (timeline == nullptr) return;
  for (const auto& op : ops) {
    if (begin) {
      timeline->begin(op->request.name, name);
    } else {
      timeline->end(op->request.name);
    }
  }
}
}  // namespace

// The timeline while one response's ops run (Horovod's layout): QUEUE ends, the op's own phase
// ("ALLREDUCE") begins, and it ends with the output's dtype and shape however run() leaves.
OpsInTimeline::OpsInTimeline(Timeline* timeline,
                             const std::vector<std::shared_ptr<detail::OpState>>& ops)
    : timeline_(timeline != nullptr && timeline->recording() ? timeline : nullptr) {
  if (timeline_ == nullptr) return;
  for (const auto& op : ops) ops_.push_back(op.get());
  begin();
}

OpsInTimeline::OpsInTimeline(Timeline* timeline, const detail::OpState& op)
    : timeline_(timeline != nullptr && timeline->recording() ? timeline : nullptr) {
  if (timeline_ == nullptr) return;
  ops_.push_back(&op);
  begin();
}

void OpsInTimeline::begin() {
  if (ops_.empty()) return;
  const std::string name = upper(op_kind_name(ops_.front()->request.kind));
  for (const detail::OpState* op : ops_) {
    timeline_->end(op->request.name);  // QUEUE
    timeline_->begin(op->request.name, name);
  }
}

OpsInTimeline::~OpsInTimeline() {
  for (const detail::OpState* op : ops_) {
    const bool buffer = op->output_in_buffer;
    timeline_->end_op(op->request.name, buffer ? op->buffer.dtype : op->output().dtype,
                      buffer ? op->buffer.shape : op->output().shape);
  }
}

void Runtime::start_timeline(const std::string& path, bool mark_cycles) {
  if (path.empty()) {
    throw StatusError(HVD_ERR_INVALID_ARGUMENT, "start_timeline: the file path is empty",
                      "give the file rank 0 writes the timeline to; stop_timeline() stops it");
  }
  if (timeline_) {
    timeline_->start(path, mark_cycles, HVD_ERR_INVALID_ARGUMENT,
                     fmt::format("start_timeline({:?})", path));
  }
}

void Runtime::stop_timeline() {
  if (timeline_) timeline_->stop();
}

void Runtime::run(const std::vector<std::shared_ptr<detail::OpState>>& ops, Timeline* timeline) {
  if (ops.empty()) return;
  const OpsInTimeline recorded(timeline, ops);
  timeline = recorded.timeline();
  const OpKind kind = ops.front()->request.kind;
  if (ops.front()->in.device.kind == Device::Kind::kCUDA) {  // never fused (the controller)
    if (!nccl_) {
      nccl_ = std::make_unique<NcclOps>(
          *backend_, topology_,
          std::chrono::duration_cast<std::chrono::milliseconds>(config_.gloo_timeout));
    }
    for (const auto& op : ops) nccl_->run(*op);
    return;
  }
  if (ops.front()->request.group != 0 && kind == OpKind::kAllreduce) {
    return allreduce_group(ops, timeline);
  }
  if (ops.size() > 1 && kind == OpKind::kAllreduce) return allreduce_fused(ops, timeline);
  if (ops.size() > 1 && kind == OpKind::kBroadcast) return broadcast_fused(ops, timeline);
  const std::string phase = collective_phase(timeline, backend_->name(), kind);
  if (timeline != nullptr) timeline->begin(ops.front()->request.name, phase);
  for (const auto& op : ops) run_one(*op);
  if (timeline != nullptr) timeline->end(ops.front()->request.name);
}

void Runtime::run_one(detail::OpState& op) {
  switch (op.request.kind) {
    case OpKind::kAllreduce:
      return allreduce(op.in, op.output(), op.options);
    case OpKind::kBroadcast:
      return broadcast(op.in, op.request.root);
    case OpKind::kAllgather:
      return allgather(op.in, op.allocate);
    case OpKind::kReducescatter:
      return reducescatter(op.in, op.allocate, op.options);
    case OpKind::kAlltoall:
      op.received_splits = alltoall(op.in, op.splits, op.allocate);
      return;
    case OpKind::kBarrier:
      return backend_->barrier();
    case OpKind::kJoin:
      return;  // no collective: the engine finished it (cycle_engine.cpp)
  }
}

// Several allreduces with the same dtype, op and scale factors (the coordinator checked) as one
// collective over the reused fusion buffer.
void Runtime::allreduce_fused(const std::vector<std::shared_ptr<detail::OpState>>& ops,
                              Timeline* timeline) {
  const detail::OpState& head = *ops.front();
  const DataType dtype = head.in.dtype;
  // Each op's bytes, once (the output's are the input's: check_allreduce).
  std::vector<std::size_t> bytes(ops.size());
  std::size_t total = 0;
  for (std::size_t i = 0; i < ops.size(); ++i) total += bytes[i] = ops[i]->in.byte_size();
  if (fusion_buffer_.size() < total) fusion_buffer_.resize(total);
  const std::string collective = collective_phase(timeline, backend_->name(), OpKind::kAllreduce);
  phase(timeline, ops, "MEMCPY_IN_FUSION_BUFFER", true);
  std::size_t at = 0;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    std::memcpy(fusion_buffer_.data() + at, ops[i]->in.data, bytes[i]);
    at += bytes[i];
  }
  phase(timeline, ops, "MEMCPY_IN_FUSION_BUFFER", false);
  phase(timeline, ops, collective, true);
  const Tensor fused{
      fusion_buffer_.data(), dtype, {static_cast<std::int64_t>(total / element_size(dtype))}};
  allreduce(fused, fused, head.options);
  phase(timeline, ops, collective, false);
  phase(timeline, ops, "MEMCPY_OUT_FUSION_BUFFER", true);
  at = 0;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    std::memcpy(ops[i]->output().data, fusion_buffer_.data() + at, bytes[i]);
    at += bytes[i];
  }
  phase(timeline, ops, "MEMCPY_OUT_FUSION_BUFFER", false);
}

void Runtime::allreduce_group(const std::vector<std::shared_ptr<detail::OpState>>& ops,
                              Timeline* timeline) {
  // Every rank has the same ops in the same order (the response's), so the same batches. A
  // stable sort by dtype keeps that order within a dtype.
  std::vector<std::shared_ptr<detail::OpState>> sorted = ops;
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
    return static_cast<int>(a->in.dtype) < static_cast<int>(b->in.dtype);
  });
  std::vector<std::shared_ptr<detail::OpState>> batch;
  std::size_t bytes = 0;
  const auto run_batch = [&] {
    if (batch.size() == 1) {
      const detail::OpState& op = *batch.front();
      const std::string phase = collective_phase(timeline, backend_->name(), OpKind::kAllreduce);
      if (timeline != nullptr) timeline->begin(op.request.name, phase);
      allreduce(op.in, op.output(), op.options);
      if (timeline != nullptr) timeline->end(op.request.name);
    } else if (!batch.empty()) {
      allreduce_fused(batch, timeline);
    }
    batch.clear();
    bytes = 0;
  };
  for (const auto& op : sorted) {
    const std::size_t n = op->in.byte_size();
    if (!batch.empty() &&
        (op->in.dtype != batch.front()->in.dtype || bytes + n > config_.fusion_threshold)) {
      run_batch();
    }
    batch.push_back(op);
    bytes += n;
  }
  run_batch();
}

// Several broadcasts from one root as one.
void Runtime::broadcast_fused(const std::vector<std::shared_ptr<detail::OpState>>& ops,
                              Timeline* timeline) {
  const int root = ops.front()->request.root;
  std::size_t total = 0;
  for (const auto& op : ops) total += op->in.byte_size();
  if (fusion_buffer_.size() < total) fusion_buffer_.resize(total);
  const std::string collective = collective_phase(timeline, backend_->name(), OpKind::kBroadcast);
  phase(timeline, ops, "MEMCPY_IN_FUSION_BUFFER", true);
  std::size_t at = 0;
  if (topology_.rank == root) {
    for (const auto& op : ops) {
      std::memcpy(fusion_buffer_.data() + at, op->in.data, op->in.byte_size());
      at += op->in.byte_size();
    }
  }
  phase(timeline, ops, "MEMCPY_IN_FUSION_BUFFER", false);
  phase(timeline, ops, collective, true);
  if (total > 0) backend_->broadcast(fusion_buffer_.data(), total, root);
  phase(timeline, ops, collective, false);
  phase(timeline, ops, "MEMCPY_OUT_FUSION_BUFFER", true);
  at = 0;
  for (const auto& op : ops) {
    std::memcpy(op->in.data, fusion_buffer_.data() + at, op->in.byte_size());
    at += op->in.byte_size();
  }
  phase(timeline, ops, "MEMCPY_OUT_FUSION_BUFFER", false);
}

void Runtime::finish_average(void* data, std::size_t count, DataType dtype) {
  if (is_floating(dtype)) {
    scale(data, count, dtype, 1.0 / topology_.size);
  } else {
    divide_integers(data, count, dtype, topology_.size);
  }
}

void Runtime::allreduce(const Tensor& in, const Tensor& out, const AllreduceOptions& options) {
  const auto count = to_size(in.num_elements());
  if (count == 0) return;
  const ReduceOp op = options.op == ReduceOp::kAverage ? ReduceOp::kSum : options.op;
  if (in.data != out.data && options.prescale == 1.0) {
    backend_->allreduce_into(in.data, out.data, count, in.dtype, op);  // the engine's own form
  } else {
    if (in.data != out.data) std::memcpy(out.data, in.data, in.byte_size());
    if (options.prescale != 1.0) scale(out.data, count, in.dtype, options.prescale);
    backend_->allreduce(out.data, count, in.dtype, op);
  }
  if (options.op == ReduceOp::kAverage) finish_average(out.data, count, in.dtype);
  if (options.postscale != 1.0) scale(out.data, count, in.dtype, options.postscale);
}

void Runtime::broadcast(const Tensor& inout, int root) {
  if (inout.byte_size() == 0) return;
  backend_->broadcast(inout.data, inout.byte_size(), root);
}

std::vector<Runtime::ShapeRecord> Runtime::exchange_shapes(const Tensor& t) {
  // [dtype, ndim, d0 .. d9] as int64 from every rank.
  constexpr std::size_t kWords = 2 + kMaxDims;
  std::vector<std::int64_t> mine(kWords, 0);
  mine[0] = static_cast<std::int64_t>(t.dtype);
  mine[1] = static_cast<std::int64_t>(t.shape.size());
  std::copy(t.shape.begin(), t.shape.end(), mine.begin() + 2);
  const auto n = static_cast<std::size_t>(topology_.size);
  std::vector<std::int64_t> all(kWords * n);
  backend_->allgatherv(mine.data(), all.data(),
                       std::vector<std::size_t>(n, kWords * sizeof(std::int64_t)));
  std::vector<ShapeRecord> out(n);
  for (std::size_t r = 0; r < n; ++r) {
    const std::int64_t* w = all.data() + r * kWords;
    out[r].dtype = static_cast<DataType>(w[0]);
    out[r].shape.assign(w + 2, w + 2 + std::clamp<std::int64_t>(w[1], 0, kMaxDims));
  }
  return out;
}

void Runtime::check_same_trailing(const char* op, const std::vector<ShapeRecord>& shapes) {
  const ShapeRecord& mine = shapes[static_cast<std::size_t>(topology_.rank)];
  for (std::size_t r = 0; r < shapes.size(); ++r) {
    const ShapeRecord& other = shapes[r];
    const bool same =
        other.dtype == mine.dtype && other.shape.size() == mine.shape.size() &&
        std::equal(other.shape.begin() + 1, other.shape.end(), mine.shape.begin() + 1);
    if (!same) {
      invalid(fmt::format("{}: rank {} has a {} tensor of shape [{}], rank {} a {} tensor of "
                          "shape [{}]",
                          op, topology_.rank, dtype_name(mine.dtype), fmt::join(mine.shape, ", "),
                          r, dtype_name(other.dtype), fmt::join(other.shape, ", ")),
              "every rank must pass the same dtype and the same dimensions after the first");
    }
  }
}

void* Runtime::allocate_output(const char* op, const Allocator& allocate,
                               const std::vector<std::int64_t>& shape, std::size_t bytes) {
  if (!allocate) invalid(fmt::format("{}: no output allocator given", op));
  void* p = allocate(shape, bytes);
  if (p == nullptr && bytes > 0) {
    invalid(fmt::format("{}: the output allocator returned null for {} bytes", op, bytes));
  }
  return p;
}

void Runtime::allgather(const Tensor& in, const Allocator& allocate) {
  const auto shapes = exchange_shapes(in);
  check_same_trailing("allgather", shapes);
  const std::size_t row_bytes = to_size(trailing_elements(in.shape)) * element_size(in.dtype);
  std::vector<std::size_t> bytes;
  std::vector<std::int64_t> out_shape = in.shape;
  out_shape[0] = 0;
  for (const ShapeRecord& s : shapes) {
    bytes.push_back(to_size(s.shape[0]) * row_bytes);
    out_shape[0] += s.shape[0];
  }
  const std::size_t total = to_size(out_shape[0]) * row_bytes;
  void* out = allocate_output("allgather", allocate, out_shape, total);
  if (total > 0) backend_->allgatherv(in.data, out, bytes);
}

void Runtime::reducescatter(const Tensor& in, const Allocator& allocate,
                            const AllreduceOptions& options) {
  const auto shapes = exchange_shapes(in);
  for (std::size_t r = 0; r < shapes.size(); ++r) {
    if (shapes[r].dtype != in.dtype || shapes[r].shape != in.shape) {
      invalid(fmt::format("reducescatter: rank {} has a {}, rank {} a {} tensor of shape [{}]",
                          topology_.rank, describe(in), r, dtype_name(shapes[r].dtype),
                          fmt::join(shapes[r].shape, ", ")),
              "every rank must pass the same dtype and shape");
    }
  }
  const auto size = static_cast<std::int64_t>(topology_.size);
  const std::int64_t rows = in.shape[0], trailing = trailing_elements(in.shape);
  std::vector<std::size_t> counts;
  for (std::int64_t r = 0; r < size; ++r) {
    counts.push_back(to_size((rows / size + (r < rows % size ? 1 : 0)) * trailing));
  }
  std::vector<std::int64_t> out_shape = in.shape;
  const std::size_t mine = counts[static_cast<std::size_t>(topology_.rank)];
  out_shape[0] = static_cast<std::int64_t>(mine) / std::max<std::int64_t>(trailing, 1);
  if (trailing == 0) out_shape[0] = rows / size + (topology_.rank < rows % size ? 1 : 0);
  void* out = allocate_output("reducescatter", allocate, out_shape, mine * element_size(in.dtype));
  if (in.num_elements() == 0) return;
  const void* send = in.data;
  std::vector<std::byte> scaled;  // the prescaled copy: the caller's input is never written
  if (options.prescale != 1.0) {
    scaled.resize(in.byte_size());
    std::memcpy(scaled.data(), in.data, in.byte_size());
    scale(scaled.data(), to_size(in.num_elements()), in.dtype, options.prescale);
    send = scaled.data();
  }
  backend_->reducescatter(send, out, counts, in.dtype, ReduceOp::kSum);
  if (options.op == ReduceOp::kAverage) finish_average(out, mine, in.dtype);
  if (options.postscale != 1.0) scale(out, mine, in.dtype, options.postscale);
}

std::vector<std::int64_t> Runtime::alltoall(const Tensor& in, std::span<const std::int64_t> splits,
                                            const Allocator& allocate) {
  const auto n = static_cast<std::size_t>(topology_.size);
  const std::vector<std::int64_t> send = alltoall_splits(in, splits, topology_.size);
  check_same_trailing("alltoall", exchange_shapes(in));
  std::vector<std::int64_t> recv(n);
  backend_->alltoallv(send.data(), std::vector<std::size_t>(n, sizeof(std::int64_t)), recv.data(),
                      std::vector<std::size_t>(n, sizeof(std::int64_t)));
  const std::size_t row_bytes = to_size(trailing_elements(in.shape)) * element_size(in.dtype);
  std::vector<std::size_t> send_bytes, recv_bytes;
  std::vector<std::int64_t> out_shape = in.shape;
  out_shape[0] = 0;
  for (std::size_t r = 0; r < n; ++r) {
    send_bytes.push_back(to_size(send[r]) * row_bytes);
    recv_bytes.push_back(to_size(recv[r]) * row_bytes);
    out_shape[0] += recv[r];
  }
  const std::size_t total = to_size(out_shape[0]) * row_bytes;
  void* out = allocate_output("alltoall", allocate, out_shape, total);
  backend_->alltoallv(in.data, send_bytes, out, recv_bytes);  // even empty: it is collective
  return recv;
}

}  // namespace hvd::runtime
