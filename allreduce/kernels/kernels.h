// Element-wise kernels on host memory: the reductions engines call back into where they have no
// native type (Gloo always, MPI for float16/bfloat16), and the scaling around a reduction.
// Pure functions; 16-bit floats are computed in float32 and rounded back.
#pragma once

#include <cstddef>
#include <string>

#include "hvd/hvd.hpp"

namespace hvd::runtime {

// out[i] = a[i] (op) b[i] for i < n; out may alias a or b. op is kSum, kMin, kMax or kProduct.
using ReduceFn = void (*)(void* out, const void* a, const void* b, std::size_t n);

// The kernel for `dtype` and `op`, or nullptr for kAverage or an invalid pair.
ReduceFn reduce_fn(DataType dtype, ReduceOp op);

// data[i] *= factor for a floating-point dtype.
void scale(void* data, std::size_t n, DataType dtype, double factor);

// data[i] /= divisor for an integer dtype, truncating toward zero.
void divide_integers(void* data, std::size_t n, DataType dtype, int divisor);

// Where the CPU has them, float16 uses F16C and bfloat16 AVX2 (same results; kernels.cpp).
// use_cpu_kernels(false) makes later reduce_fn() and scale() calls use the baseline code
// instead, so that tests and benchmarks can run both on one machine; cpu_kernels_in_use() says
// which are in use ("float16: F16C, bfloat16: AVX2", or "baseline").
void use_cpu_kernels(bool on);
std::string cpu_kernels_in_use();

}  // namespace hvd::runtime
