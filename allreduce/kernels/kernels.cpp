#include "allreduce/kernels/kernels.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

#include "allreduce/kernels/half.h"

namespace hvd::runtime {
namespace {

struct Sum {
  template <class T>
  static T apply(T a, T b) {
    return static_cast<T>(a + b);
  }
};
struct Min {
  template <class T>
  static T apply(T a, T b) {
    return std::min(a, b);
  }
};
struct Max {
  template <class T>
  static T apply(T a, T b) {
    return std::max(a, b);
  }
};
struct Product {
  template <class T>
  static T apply(T a, T b) {
    return static_cast<T>(a * b);
  }
};

// Native arithmetic types. Integer sums wrap (computed unsigned) rather than being undefined.
template <class T, class Op>
T combine(T a, T b) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<Op, Min> && !std::is_same_v<Op, Max>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(Op::template apply<U>(static_cast<U>(a), static_cast<U>(b)));
  } else {
    return Op::template apply<T>(a, b);
  }
}

// `out` is often `a` itself (Gloo reduces in place), so the compiler cannot vectorize a plain
// loop without a runtime overlap check that fails exactly then. Combining 64 bytes into a local
// block and storing the block is vectorized at -O2 and correct when `out` equals `a` or `b`:
// 1.4x faster than the plain loop for a 32 MiB float sum here, and, unlike the plain loop's
// single tight instruction loop, not at the mercy of where the linker places it.
template <class T, class Op>
void reduce_native(void* out, const void* a, const void* b, std::size_t n) {
  auto* o = static_cast<T*>(out);
  const auto* x = static_cast<const T*>(a);
  const auto* y = static_cast<const T*>(b);
  constexpr std::size_t kBlock = 64 / sizeof(T);
  std::size_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    T block[kBlock];
    for (std::size_t k = 0; k < kBlock; ++k) block[k] = combine<T, Op>(x[i + k], y[i + k]);
    std::memcpy(o + i, block, sizeof block);
  }
  for (; i < n; ++i) o[i] = combine<T, Op>(x[i], y[i]);
}

// 16-bit floats: widen, combine in float32, round back; in 64-byte blocks like reduce_native
// (the conversions are branch-free, half.h, so a block vectorizes).
template <class H, float (*To)(H), H (*From)(float), class Op>
void reduce_half(void* out, const void* a, const void* b, std::size_t n) {
  auto* o = static_cast<H*>(out);
  const auto* x = static_cast<const H*>(a);
  const auto* y = static_cast<const H*>(b);
  constexpr std::size_t kBlock = 64 / sizeof(H);
  std::size_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    H block[kBlock];
    for (std::size_t k = 0; k < kBlock; ++k) {
      block[k] = From(Op::template apply<float>(To(x[i + k]), To(y[i + k])));
    }
    std::memcpy(o + i, block, sizeof block);
  }
  for (; i < n; ++i) o[i] = From(Op::template apply<float>(To(x[i]), To(y[i])));
}

// p[i] = round(p[i] * f) for 16-bit floats, in blocks as above.
template <class H, float (*To)(H), H (*From)(float)>
void scale_half(void* data, std::size_t n, float f) {
  auto* p = static_cast<H*>(data);
  constexpr std::size_t kBlock = 64 / sizeof(H);
  std::size_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    H block[kBlock];
    for (std::size_t k = 0; k < kBlock; ++k) block[k] = From(To(p[i + k]) * f);
    std::memcpy(p + i, block, sizeof block);
  }
  for (; i < n; ++i) p[i] = From(To(p[i]) * f);
}

// Tests and benchmarks turn the CPU-specific kernels off to run the baseline code beside them.
std::atomic<bool> cpu_kernels{true};

#if defined(__x86_64__)
// The CPU has AVX and the OS saves its registers (cpuid's OSXSAVE and AVX bits, then xgetbv):
// what both F16C and AVX2 code need before their own feature bit.
bool avx_usable() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return false;
  if ((ecx & bit_OSXSAVE) == 0 || (ecx & bit_AVX) == 0) return false;
  unsigned lo = 0, hi = 0;
  __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));  // does the OS save the AVX registers?
  return (lo & 0x6u) == 0x6u;
}

// float16 on x86-64 CPUs with F16C (Ivy Bridge and later): the hardware converts 8 halves at a
// time, rounding to nearest even like half_from_float. The one difference: a NaN keeps its
// payload's top bits (quieted) where half_from_float returns 0x7E00; it stays a NaN either way.
// The generic block code above, vectorized with SSE2 only, is ~10x slower (bench/README.md).
bool has_f16c() {
  static const bool yes = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return avx_usable() && __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
  }();
  return yes;
}

template <class Op>
__attribute__((target("avx,f16c"))) void reduce_f16c(void* out, const void* a, const void* b,
                                                     std::size_t n) {
  auto* o = static_cast<float16*>(out);
  const auto* x = static_cast<const float16*>(a);
  const auto* y = static_cast<const float16*>(b);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    alignas(32) float fx[8], fy[8], r[8];
    _mm256_store_ps(fx, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i))));
    _mm256_store_ps(fy, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(y + i))));
    for (int k = 0; k < 8; ++k) r[k] = Op::template apply<float>(fx[k], fy[k]);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(o + i),
                     _mm256_cvtps_ph(_mm256_load_ps(r), _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i < n; ++i) {
    o[i] = half_from_float(Op::template apply<float>(half_to_float(x[i]), half_to_float(y[i])));
  }
}

__attribute__((target("avx,f16c"))) void scale_f16c(void* data, std::size_t n, float f) {
  auto* p = static_cast<float16*>(data);
  const __m256 factor = _mm256_set1_ps(f);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    auto* at = reinterpret_cast<__m128i*>(p + i);
    const __m256 v = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128(at)), factor);
    _mm_storeu_si128(at, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i < n; ++i) p[i] = half_from_float(half_to_float(p[i]) * f);
}

// bfloat16 with AVX2 (Haswell and later): its conversions are integer shifts, adds and a
// select, 8 lanes at a time, the same arithmetic as bf16_to_float and bf16_from_float (half.h),
// so the same bits. (The baseline block loop compiled with AVX2 reached half this speed: GCC
// widens and narrows the 16-bit lanes through shuffles.)
bool has_avx2() {
  static const bool yes = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return avx_usable() && __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) != 0 &&
           (ebx & bit_AVX2) != 0;
  }();
  return yes;
}

__attribute__((target("avx2"))) inline __m256 bf16x8_to_float(const bfloat16* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

__attribute__((target("avx2"))) inline void float_to_bf16x8(bfloat16* p, __m256 v) {
  const __m256i f = _mm256_castps_si256(v);
  const __m256i high = _mm256_srli_epi32(f, 16);
  const __m256i lsb = _mm256_and_si256(high, _mm256_set1_epi32(1));
  const __m256i rounded =
      _mm256_srli_epi32(_mm256_add_epi32(f, _mm256_add_epi32(_mm256_set1_epi32(0x7FFF), lsb)), 16);
  const __m256i quiet_nan = _mm256_or_si256(high, _mm256_set1_epi32(0x40));
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(f, _mm256_set1_epi32(0x7FFFFFFF)),
                                         _mm256_set1_epi32(0x7F800000));
  const __m256i out = _mm256_blendv_epi8(rounded, quiet_nan, nan);  // each lane <= 0xFFFF
  // Pack the 8 lanes to 16 bits: packus works within each 128-bit half, then join the halves.
  const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(out, out), 0xD8);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(packed));
}

template <class Op>
__attribute__((target("avx2"))) void reduce_bf16_avx2(void* out, const void* a, const void* b,
                                                      std::size_t n) {
  auto* o = static_cast<bfloat16*>(out);
  const auto* x = static_cast<const bfloat16*>(a);
  const auto* y = static_cast<const bfloat16*>(b);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    alignas(32) float fx[8], fy[8], r[8];
    _mm256_store_ps(fx, bf16x8_to_float(x + i));
    _mm256_store_ps(fy, bf16x8_to_float(y + i));
    for (int k = 0; k < 8; ++k) r[k] = Op::template apply<float>(fx[k], fy[k]);
    float_to_bf16x8(o + i, _mm256_load_ps(r));
  }
  for (; i < n; ++i) {
    o[i] = bf16_from_float(Op::template apply<float>(bf16_to_float(x[i]), bf16_to_float(y[i])));
  }
}

__attribute__((target("avx2"))) void scale_bf16_avx2(void* data, std::size_t n, float f) {
  auto* p = static_cast<bfloat16*>(data);
  const __m256 factor = _mm256_set1_ps(f);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) float_to_bf16x8(p + i, _mm256_mul_ps(bf16x8_to_float(p + i), factor));
  for (; i < n; ++i) p[i] = bf16_from_float(bf16_to_float(p[i]) * f);
}
#else
bool has_f16c() { return false; }
bool has_avx2() { return false; }
template <class Op>
void reduce_f16c(void*, const void*, const void*, std::size_t) {}
void scale_f16c(void*, std::size_t, float) {}
template <class Op>
void reduce_bf16_avx2(void*, const void*, const void*, std::size_t) {}
void scale_bf16_avx2(void*, std::size_t, float) {}
#endif

bool use_f16c() { return cpu_kernels.load(std::memory_order_relaxed) && has_f16c(); }
bool use_avx2() { return cpu_kernels.load(std::memory_order_relaxed) && has_avx2(); }

template <class Op>
ReduceFn for_op(DataType dtype) {
  switch (dtype) {
    case DataType::kUInt8:
      return reduce_native<std::uint8_t, Op>;
    case DataType::kInt8:
      return reduce_native<std::int8_t, Op>;
    case DataType::kInt16:
      return reduce_native<std::int16_t, Op>;
    case DataType::kInt32:
      return reduce_native<std::int32_t, Op>;
    case DataType::kInt64:
      return reduce_native<std::int64_t, Op>;
    case DataType::kFloat16:
      return use_f16c() ? reduce_f16c<Op>
                        : reduce_half<float16, half_to_float, half_from_float, Op>;
    case DataType::kBFloat16:
      return use_avx2() ? reduce_bf16_avx2<Op>
                        : reduce_half<bfloat16, bf16_to_float, bf16_from_float, Op>;
    case DataType::kFloat32:
      return reduce_native<float, Op>;
    case DataType::kFloat64:
      return reduce_native<double, Op>;
  }
  return nullptr;
}

template <class T>
void divide_as(void* data, std::size_t n, int divisor) {
  auto* p = static_cast<T*>(data);
  // In int64: the divisor (the world size) need not fit T (int8 and 200 ranks, uint8 and 256).
  for (std::size_t i = 0; i < n; ++i) {
    p[i] = static_cast<T>(static_cast<std::int64_t>(p[i]) / divisor);
  }
}

// p[i] *= f in 64-byte blocks: a plain loop of unknown length is not vectorized at -O2 (GCC's
// "very cheap" cost model refuses loops that need a scalar epilogue), and averaging runs this
// over every fused buffer: 1.6 MB of float32 took ~130 us scalar on the development VM.
template <class T>
void scale_native(void* data, std::size_t n, T f) {
  auto* p = static_cast<T*>(data);
  constexpr std::size_t kBlock = 64 / sizeof(T);
  std::size_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    for (std::size_t k = 0; k < kBlock; ++k) p[i + k] *= f;
  }
  for (; i < n; ++i) p[i] *= f;
}

}  // namespace

void use_cpu_kernels(bool on) { cpu_kernels.store(on, std::memory_order_relaxed); }

std::string cpu_kernels_in_use() {
  std::string out;
  if (use_f16c()) out += "float16: F16C";
  if (use_avx2()) out += std::string(out.empty() ? "" : ", ") + "bfloat16: AVX2";
  return out.empty() ? "baseline" : out;
}

ReduceFn reduce_fn(DataType dtype, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return for_op<Sum>(dtype);
    case ReduceOp::kMin:
      return for_op<Min>(dtype);
    case ReduceOp::kMax:
      return for_op<Max>(dtype);
    case ReduceOp::kProduct:
      return for_op<Product>(dtype);
    case ReduceOp::kAverage:
      return nullptr;
  }
  return nullptr;
}

void scale(void* data, std::size_t n, DataType dtype, double factor) {
  switch (dtype) {
    case DataType::kFloat32:
      return scale_native<float>(data, n, static_cast<float>(factor));
    case DataType::kFloat64:
      return scale_native<double>(data, n, factor);
    case DataType::kFloat16:
      if (use_f16c()) return scale_f16c(data, n, static_cast<float>(factor));
      return scale_half<float16, half_to_float, half_from_float>(data, n,
                                                                 static_cast<float>(factor));
    case DataType::kBFloat16:
      if (use_avx2()) return scale_bf16_avx2(data, n, static_cast<float>(factor));
      return scale_half<bfloat16, bf16_to_float, bf16_from_float>(data, n,
                                                                  static_cast<float>(factor));
    default:
      return;  // callers only scale floating-point data
  }
}

void divide_integers(void* data, std::size_t n, DataType dtype, int divisor) {
  switch (dtype) {
    case DataType::kUInt8:
      return divide_as<std::uint8_t>(data, n, divisor);
    case DataType::kInt8:
      return divide_as<std::int8_t>(data, n, divisor);
    case DataType::kInt16:
      return divide_as<std::int16_t>(data, n, divisor);
    case DataType::kInt32:
      return divide_as<std::int32_t>(data, n, divisor);
    case DataType::kInt64:
      return divide_as<std::int64_t>(data, n, divisor);
    default:
      return;
  }
}

}  // namespace hvd::runtime
