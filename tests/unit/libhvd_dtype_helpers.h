// Shared by the libhvd dtype and kernel unit tests: every dtype, the ops with a kernel, and the
// bits of a float rounded to float16/bfloat16.
#pragma once

#include <cstdint>

#include "hvd/hvd.hpp"

namespace hvd_test {

inline constexpr hvd::DataType kAllDtypes[] = {
    hvd::DataType::kUInt8,    hvd::DataType::kInt8,    hvd::DataType::kInt16,
    hvd::DataType::kInt32,    hvd::DataType::kInt64,   hvd::DataType::kFloat16,
    hvd::DataType::kBFloat16, hvd::DataType::kFloat32, hvd::DataType::kFloat64};
inline constexpr hvd::ReduceOp kKernelOps[] = {hvd::ReduceOp::kSum, hvd::ReduceOp::kMin,
                                               hvd::ReduceOp::kMax, hvd::ReduceOp::kProduct};

inline std::uint16_t f16_bits(float v) { return hvd::float16_from(v).bits; }
inline std::uint16_t bf16_bits(float v) { return hvd::bfloat16_from(v).bits; }

}  // namespace hvd_test
