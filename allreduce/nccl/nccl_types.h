// hvd's dtypes and reduce ops in NCCL's terms. Pure; needs only nccl.h (unit-tested where NCCL is
// installed, on machines without a GPU).
#pragma once

#include <nccl.h>

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
