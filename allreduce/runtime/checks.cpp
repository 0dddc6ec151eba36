#include "allreduce/runtime/checks.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>

#include "allreduce/api/status_error.h"
#include "allreduce/kernels/dtype.h"

namespace hvd::runtime {

void invalid(const std::string& what, std::string hint) {
  throw StatusError(HVD_ERR_INVALID_ARGUMENT, what, std::move(hint));
}

void check_tensor(const char* op, const char* role, const Tensor& t) {
  if (!is_valid(t.dtype)) {
    invalid(
        fmt::format("{}: the {} has an invalid dtype ({})", op, role, static_cast<int>(t.dtype)));
  }
  for (std::int64_t d : t.shape) {
    if (d < 0)
      invalid(fmt::format("{}: the {} has a negative dimension: {}", op, role, describe(t)));
  }
  if (t.device.kind != Device::Kind::kCPU && t.device.kind != Device::Kind::kCUDA) {
    invalid(fmt::format("{}: the {} has an unknown device kind", op, role));
  }
  if (t.data == nullptr && t.num_elements() > 0) {
    invalid(fmt::format("{}: the {} ({}) has a null data pointer", op, role, describe(t)));
  }
}

void check_rows(const char* op, const Tensor& t) {
  if (t.shape.empty() || t.shape.size() > kMaxDims) {
    invalid(
        fmt::format("{} needs a tensor with 1 to {} dimensions, got {}", op, kMaxDims, describe(t)),
        "give a scalar the shape [1]");
  }
}

void check_scale_factors(const char* op, const Tensor& in, const AllreduceOptions& options) {
  for (double s : {options.prescale, options.postscale}) {
    if (!std::isfinite(s)) invalid(fmt::format("{}: scale factor {} is not finite", op, s));
    if (s != 1.0 && !is_floating(in.dtype)) {
      invalid(fmt::format("{}: prescale/postscale {} on a {}", op, s, describe(in)),
              "scaling needs a floating-point dtype; scale integer data yourself");
    }
  }
}

void check_allreduce(const Tensor& in, const Tensor& out, const AllreduceOptions& options) {
  check_tensor("allreduce", "input", in);
  if (&out != &in) check_tensor("allreduce", "output", out);  // in place: checked just now
  if (in.dtype != out.dtype || in.num_elements() != out.num_elements() || in.device != out.device) {
    invalid(fmt::format("allreduce: the input ({}) and the output ({}) differ", describe(in),
                        describe(out)),
            "give the output the input's dtype, element count and device");
  }
  if (!is_valid(options.op)) {
    invalid(fmt::format("allreduce: invalid reduce op {}", static_cast<int>(options.op)));
  }
  check_scale_factors("allreduce", in, options);
}

void check_broadcast(const Tensor& t, int root, int size) {
  check_tensor("broadcast", "tensor", t);
  if (root < 0 || root >= size) {
    invalid(fmt::format("broadcast: root rank {} is not a rank of this job (size {})", root, size),
            fmt::format("give a root from 0 to {}", size - 1));
  }
}

void check_reducescatter(const Tensor& in, const AllreduceOptions& options) {
  check_tensor("reducescatter", "input", in);
  check_rows("reducescatter", in);
  const ReduceOp op = options.op;
  if (op != ReduceOp::kSum && op != ReduceOp::kAverage) {
    invalid(fmt::format("reducescatter supports sum and average, not {}",
                        is_valid(op) ? op_name(op) : "an invalid op"));
  }
  check_scale_factors("reducescatter", in, options);
}

// The rows going to each rank: `splits`, or equal parts when empty.
std::vector<std::int64_t> alltoall_splits(const Tensor& in, std::span<const std::int64_t> splits,
                                          int size) {
  check_tensor("alltoall", "input", in);
  check_rows("alltoall", in);
  const auto n = static_cast<std::size_t>(size);
  const std::int64_t rows = in.shape[0];
  std::vector<std::int64_t> send(splits.begin(), splits.end());
  if (send.empty()) {
    if (rows % size != 0) {
      invalid(fmt::format("alltoall: {} rows do not split evenly over {} ranks", rows, n),
              "pass splits (rows per destination rank)");
    }
    send.assign(n, rows / size);
  }
  std::int64_t sum = 0;
  for (std::int64_t s : send) {
    if (s < 0) invalid(fmt::format("alltoall: negative split {}", s));
    sum += s;
  }
  if (send.size() != n || sum != rows) {
    invalid(
        fmt::format("alltoall: splits [{}] must have {} entries summing to the first "
                    "dimension {}",
                    fmt::join(send, ", "), n, rows));
  }
  return send;
}

void check_submission(const detail::OpState& op, int size) {
  const Request& q = op.request;
  if (q.name.empty()) invalid(fmt::format("{}: the tensor name is empty", op_kind_name(q.kind)));
  switch (q.kind) {
    case OpKind::kAllreduce:
      check_allreduce(op.in, op.output(), op.options);
      break;
    case OpKind::kBroadcast:
      check_broadcast(op.in, q.root, size);
      break;
    case OpKind::kAllgather:
      check_tensor("allgather", "input", op.in);
      check_rows("allgather", op.in);
      break;
    case OpKind::kReducescatter:
      check_reducescatter(op.in, op.options);
      break;
    case OpKind::kAlltoall:
      alltoall_splits(op.in, op.splits, size);
      break;
    case OpKind::kBarrier:
    case OpKind::kJoin:
      break;
  }
}

}  // namespace hvd::runtime
