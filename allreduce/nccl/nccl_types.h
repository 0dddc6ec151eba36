// hvd's dtypes and reduce ops in NCCL's terms (int16, which NCCL lacks, moves as bytes). Pure;
// needs only nccl.h (unit-tested where NCCL is installed, on machines without a GPU).
#pragma once

#include <nccl.h>

#include <cstddef>
#include <optional>

#include "hvd/hvd.h"

namespace hvd::nccl {

inline std::optional<ncclDataType_t> nccl_dtype(int dtype) {
  switch (dtype) {
    case HVD_UINT8:
      return ncclUint8;
    case HVD_INT8:
      return ncclInt8;
    case HVD_INT32:
      return ncclInt32;
    case HVD_INT64:
      return ncclInt64;
    case HVD_FLOAT16:
      return ncclFloat16;
    case HVD_BFLOAT16:
      return ncclBfloat16;
    case HVD_FLOAT32:
      return ncclFloat32;
    case HVD_FLOAT64:
      return ncclFloat64;
    default:
      return std::nullopt;
  }
}

// NCCL has no 16-bit integer type, so it cannot reduce int16: the plugin refuses those reductions
// with this message, naming the type and the way out.
inline constexpr const char* kNcclNoInt16 =
    "NCCL has no int16 type, so reductions of int16 CUDA tensors cannot run on NCCL";

// How to move `count` elements of `dtype` without arithmetic (broadcast, allgather): NCCL's own
// type, or, for int16 which NCCL lacks, as bytes (ncclUint8, twice the count). Moving bytes is
// exact for any type; no reduction may use it.
struct NcclMove {
  ncclDataType_t type;
  size_t count;
};
inline std::optional<NcclMove> nccl_move(int dtype, size_t count) {
  if (dtype == HVD_INT16) return NcclMove{ncclUint8, count * 2};
  const auto t = nccl_dtype(dtype);
  if (!t) return std::nullopt;
  return NcclMove{*t, count};
}

// ncclAvg is native (NCCL >= 2.10): no postscale pass for an average.
inline std::optional<ncclRedOp_t> nccl_op(int op) {
  switch (op) {
    case HVD_SUM:
      return ncclSum;
    case HVD_AVERAGE:
      return ncclAvg;
    case HVD_MIN:
      return ncclMin;
    case HVD_MAX:
      return ncclMax;
    case HVD_PRODUCT:
      return ncclProd;
    default:
      return std::nullopt;
  }
}

// The op to give NCCL for hvd's `op` on a communicator of `nranks` ranks. On one rank an average
// is the identity, and NCCL's one-rank average (its premultiply kernel, used for float types)
// leaves the last elements unwritten whenever the count does not divide evenly among its blocks:
// NVIDIA/nccl#1950, fixed in NCCL 2.29.7. tests/gpu/nccl_check.sh found it on an H200 with NCCL
// 2.28.9 (float64, 1,000,003 elements: the last 3 kept their old bytes). A sum on one rank is a
// plain copy, exact for every dtype, so one rank sums instead of averaging, whatever the version.
inline std::optional<ncclRedOp_t> nccl_op(int op, int nranks) {
  if (op == HVD_AVERAGE && nranks == 1) return ncclSum;
  return nccl_op(op);
}

}  // namespace hvd::nccl
