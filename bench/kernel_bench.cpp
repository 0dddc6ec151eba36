// libhvd's host kernels on their own: the reduce functions Gloo calls (and MPI, for the 16-bit
// floats, as its custom reduction) and scale() (average, prescale/postscale), per dtype, in
// place on one thread, as the engine runs them. No processes, no engine: a kernel change's
// effect without the noise of a collective.
//
// Usage: kernel_bench [ELEMENTS]   (default 1048576). Prints, per kernel, the median of 9
// batches of microseconds per call and the GB/s of output written; the 16-bit types twice, with
// the CPU-specific kernels (F16C, AVX2) and with the baseline code.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "allreduce/kernels/dtype.h"
#include "allreduce/kernels/kernels.h"

namespace {

using hvd::DataType;
using Clock = std::chrono::steady_clock;

// Median microseconds per call of `body` over 9 batches of `calls`.
template <class Body>
double median_us(int calls, Body&& body) {
  std::vector<double> batches;
  for (int b = 0; b < 9; ++b) {
    const auto t0 = Clock::now();
    for (int c = 0; c < calls; ++c) body();
    batches.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / calls);
  }
  std::sort(batches.begin(), batches.end());
  return batches[4];
}

template <class T>
void bench(const char* name, DataType dtype, std::size_t n, T (*from)(float)) {
  std::vector<T> a(n), b(n);
  for (std::size_t i = 0; i < n; ++i) {
    a[i] = from(static_cast<float>(i % 1000) * 0.01f);
    b[i] = from(1.5f);
  }
  const hvd::runtime::ReduceFn sum = hvd::runtime::reduce_fn(dtype, hvd::ReduceOp::kSum);
  const int calls = std::max(1, static_cast<int>((64u << 20) / (n * sizeof(T))));
  // Summing b into a again and again: the values grow, the work does not.
  const double sum_us = median_us(calls, [&] { sum(a.data(), a.data(), b.data(), n); });
  const double scale_us = median_us(calls, [&] { hvd::runtime::scale(a.data(), n, dtype, 0.999); });
  const double mb = static_cast<double>(n * sizeof(T)) / 1e3;  // MB per call, in us -> GB/s
  std::printf("%-9s sum in place %9.1f us (%5.2f GB/s)   scale %9.1f us (%5.2f GB/s)\n", name,
              sum_us, mb / sum_us, scale_us, mb / scale_us);
}

float as_float(float v) { return v; }
double as_double(float v) { return v; }

}  // namespace

int main(int argc, char** argv) {
  const std::size_t n = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : (1u << 20);
  if (n == 0) {
    std::fprintf(stderr, "kernel_bench: ELEMENTS must be a positive number\n");
    return 2;
  }
  std::printf("kernel_bench: %zu elements per call, in place, one thread; CPU kernels: %s\n", n,
              hvd::runtime::cpu_kernels_in_use().c_str());
  bench<float>("float32", DataType::kFloat32, n, as_float);
  bench<double>("float64", DataType::kFloat64, n, as_double);
  bench<hvd::float16>("float16", DataType::kFloat16, n, hvd::float16_from);
  bench<hvd::bfloat16>("bfloat16", DataType::kBFloat16, n, hvd::bfloat16_from);
  // The same 16-bit kernels as a CPU without F16C or AVX2 runs them.
  hvd::runtime::use_cpu_kernels(false);
  bench<hvd::float16>("float16*", DataType::kFloat16, n, hvd::float16_from);
  bench<hvd::bfloat16>("bfloat16*", DataType::kBFloat16, n, hvd::bfloat16_from);
  std::printf("* the baseline code (use_cpu_kernels(false))\n");
  return 0;
}
