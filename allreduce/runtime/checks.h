// What one rank can check about an op by itself, before any rank talks to another: dtypes,
// shapes, devices, roots, reduce ops, splits. Runtime::submit() runs these on the caller's thread,
// so a bad argument throws at once (StatusError, HVD_ERR_INVALID_ARGUMENT) instead of reaching the
// engine; the executors then trust them.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "allreduce/engine/op_state.h"

namespace hvd::runtime {

inline constexpr std::size_t kMaxDims = 10;  // allgather/alltoall/reducescatter shape records

[[noreturn]] void invalid(const std::string& what, std::string hint = {});

void check_tensor(const char* op, const char* role, const Tensor& t);
void check_rows(const char* op, const Tensor& t);  // 1 to kMaxDims dimensions
// Finite prescale/postscale, other than 1.0 on floating-point dtypes only (`op` names the call).
void check_scale_factors(const char* op, const Tensor& in, const AllreduceOptions& options);
void check_allreduce(const Tensor& in, const Tensor& out, const AllreduceOptions& options);
void check_broadcast(const Tensor& t, int root, int size);
void check_reducescatter(const Tensor& in, const AllreduceOptions& options);
// The rows going to each rank: `splits`, or equal parts when empty; checked.
std::vector<std::int64_t> alltoall_splits(const Tensor& in, std::span<const std::int64_t> splits,
                                          int size);

// Everything above that applies to `op` (a job of `size` ranks), and a non-empty name.
void check_submission(const detail::OpState& op, int size);

}  // namespace hvd::runtime
