// The Runtime's part of eager allreduces (OpRunner::eager_input, run_eager; cycle_engine.h): which
// ops may travel with their negotiation, and the reduction of every rank's input, in rank order,
// with libhvd's kernels.
#include <cstdint>
#include <cstring>

#include <fmt/format.h>

#include "allreduce/api/status_error.h"
#include "allreduce/engine/timeline.h"
#include "allreduce/kernels/dtype.h"
#include "allreduce/kernels/kernels.h"
#include "allreduce/runtime/runtime.h"

namespace hvd::runtime {

std::string_view Runtime::eager_input(const detail::OpState& op) {
  const Request& q = op.request;
  const std::size_t bytes = op.in.byte_size();
  // A group's member never: a group is one response, run as one (an eager member of a group of
  // one would be the same thing, but the group's rule stays simple).
  if (q.kind != OpKind::kAllreduce || q.group != 0 || bytes == 0 || bytes > eager_bytes_ ||
      q.device.kind != Device::Kind::kCPU || q.prescale != 1.0 ||
      reduce_fn(q.dtype, q.op == ReduceOp::kAverage ? ReduceOp::kSum : q.op) == nullptr) {
    return {};
  }
  return {static_cast<const char*>(op.in.data), bytes};
}

void Runtime::run_eager(detail::OpState& op, std::span<const std::string_view> inputs,
                        Timeline* timeline) {
  const Tensor& out = op.output();
  const auto count = static_cast<std::size_t>(out.num_elements());
  const ReduceOp reduce = op.options.op == ReduceOp::kAverage ? ReduceOp::kSum : op.options.op;
  const ReduceFn fn = reduce_fn(out.dtype, reduce);
  if (fn == nullptr || inputs.size() != static_cast<std::size_t>(topology_.size)) {
    throw StatusError(HVD_ERR_INTERNAL, fmt::format("allreduce '{}' cannot run from {} gathered "
                                                    "inputs",
                                                    op.request.name, inputs.size()));
  }
  for (std::size_t r = 0; r < inputs.size(); ++r) {
    if (inputs[r].size() != out.byte_size()) {
      throw StatusError(HVD_ERR_INTERNAL,
                        fmt::format("allreduce '{}': rank {} brought {} bytes of input, not {}",
                                    op.request.name, r, inputs[r].size(), out.byte_size()));
    }
  }
  const OpsInTimeline recorded(timeline, op);
  timeline = recorded.timeline();
  if (timeline != nullptr) timeline->begin(op.request.name, "EAGER_REDUCE");
  // Rank order on every rank: the same bits everywhere. In cycles the inputs start at 16-byte
  // boundaries of their messages (frame_contribution), whose buffers malloc aligned: the kernels
  // read them in place. Rank 0 of the TCP engine keeps an input of up to 15 bytes in a
  // std::string's own 8-byte aligned storage: that one is copied first.
  std::memcpy(out.data, inputs[0].data(), out.byte_size());
  std::vector<std::max_align_t> aligned;  // only for an input that is not aligned
  for (std::size_t r = 1; r < inputs.size(); ++r) {
    const void* in = inputs[r].data();
    if (reinterpret_cast<std::uintptr_t>(in) % alignof(std::max_align_t) != 0) {
      aligned.resize(inputs[r].size() / sizeof(std::max_align_t) + 1);
      std::memcpy(aligned.data(), in, inputs[r].size());
      in = aligned.data();
    }
    fn(out.data, out.data, in, count);
  }
  if (op.options.op == ReduceOp::kAverage) finish_average(out.data, count, out.dtype);
  if (op.options.postscale != 1.0) scale(out.data, count, out.dtype, op.options.postscale);
  if (timeline != nullptr) timeline->end(op.request.name);  // EAGER_REDUCE
}

}  // namespace hvd::runtime
