// libhvd's host kernels: the reduce functions Gloo (and MPI, for 16-bit floats) call, and the
// scaling and integer division used for prescale/postscale and average.
#include "tests/support/catch.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "allreduce/kernels/dtype.h"
#include "allreduce/kernels/kernels.h"
#include "hvd/hvd.hpp"
#include "tests/unit/libhvd_dtype_helpers.h"

using hvd::bfloat16;
using hvd::DataType;
using hvd::float16;
using hvd::ReduceOp;
using namespace hvd_test;

// ---- reduce_fn ----

namespace {

template <class T>
struct Case {
  std::vector<T> a, b, sum, min, max, product;
};

template <class T>
const std::vector<T>& expected_of(const Case<T>& c, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return c.sum;
    case ReduceOp::kMin:
      return c.min;
    case ReduceOp::kMax:
      return c.max;
    default:
      return c.product;
  }
}

// Native types: out separate, out == a and out == b.
template <class T>
void check_native(DataType dtype, const Case<T>& c) {
  for (ReduceOp op : kKernelOps) {
    INFO(hvd::dtype_name(dtype) << " " << hvd::op_name(op));
    const auto fn = hvd::runtime::reduce_fn(dtype, op);
    REQUIRE(fn != nullptr);
    const auto& want = expected_of(c, op);
    std::vector<T> out(c.a.size());
    fn(out.data(), c.a.data(), c.b.data(), c.a.size());
    CHECK(out == want);
    std::vector<T> a = c.a;
    fn(a.data(), a.data(), c.b.data(), a.size());  // out aliases a
    CHECK(a == want);
    std::vector<T> b = c.b;
    fn(b.data(), c.a.data(), b.data(), b.size());  // out aliases b
    CHECK(b == want);
    // n limits the work: the element past n is untouched.
    std::vector<T> partial = c.a;
    fn(partial.data(), partial.data(), c.b.data(), 1);
    CHECK(partial[0] == want[0]);
    CHECK(partial[1] == c.a[1]);
  }
}

// 16-bit floats, from values exact in both formats: compare as floats.
template <class H, H (*From)(float)>
void check_half(DataType dtype, const Case<double>& c) {
  auto pack = [](const std::vector<double>& v) {
    std::vector<H> out;
    for (double x : v) out.push_back(From(static_cast<float>(x)));
    return out;
  };
  auto unpack = [](const std::vector<H>& v) {
    std::vector<double> out;
    for (H x : v) out.push_back(static_cast<double>(hvd::to_float(x)));
    return out;
  };
  const auto a = pack(c.a);
  const auto b = pack(c.b);
  REQUIRE(unpack(a) == c.a);
  REQUIRE(unpack(b) == c.b);
  for (ReduceOp op : kKernelOps) {
    INFO(hvd::dtype_name(dtype) << " " << hvd::op_name(op));
    const auto fn = hvd::runtime::reduce_fn(dtype, op);
    REQUIRE(fn != nullptr);
    std::vector<H> out(a.size());
    fn(out.data(), a.data(), b.data(), a.size());
    CHECK(unpack(out) == expected_of(c, op));
    auto inplace = a;
    fn(inplace.data(), inplace.data(), b.data(), inplace.size());
    CHECK(unpack(inplace) == expected_of(c, op));
  }
}

}  // namespace

TEST_CASE("reduce_fn: integer kernels, wrapping instead of overflow", "[libhvd]") {
  check_native<std::uint8_t>(DataType::kUInt8, {.a = {1, 200, 7, 0},
                                                .b = {2, 100, 7, 255},
                                                .sum = {3, 44, 14, 255},
                                                .min = {1, 100, 7, 0},
                                                .max = {2, 200, 7, 255},
                                                .product = {2, 32, 49, 0}});
  check_native<std::int8_t>(DataType::kInt8, {.a = {-3, 100, 5, -128},
                                              .b = {4, 100, -6, -1},
                                              .sum = {1, -56, -1, 127},
                                              .min = {-3, 100, -6, -128},
                                              .max = {4, 100, 5, -1},
                                              .product = {-12, 16, -30, -128}});
  // int16: 30000 + 30000 and -32768 * -1 wrap; 30000 * 30000 keeps its low 16 bits.
  check_native<std::int16_t>(DataType::kInt16, {.a = {-3, 30000, 300, -32768},
                                                .b = {4, 30000, -200, -1},
                                                .sum = {1, -5536, 100, 32767},
                                                .min = {-3, 30000, -200, -32768},
                                                .max = {4, 30000, 300, -1},
                                                .product = {-12, -5888, 5536, -32768}});
  constexpr std::int32_t i32max = std::numeric_limits<std::int32_t>::max();
  constexpr std::int32_t i32min = std::numeric_limits<std::int32_t>::min();
  check_native<std::int32_t>(DataType::kInt32, {.a = {-5, i32max, 3, -2},
                                                .b = {3, 1, -4, -2},
                                                .sum = {-2, i32min, -1, -4},
                                                .min = {-5, 1, -4, -2},
                                                .max = {3, i32max, 3, -2},
                                                .product = {-15, i32max, -12, 4}});
  constexpr std::int64_t i64max = std::numeric_limits<std::int64_t>::max();
  constexpr std::int64_t i64min = std::numeric_limits<std::int64_t>::min();
  constexpr std::int64_t p40 = std::int64_t{1} << 40;
  constexpr std::int64_t p30 = std::int64_t{1} << 30;
  check_native<std::int64_t>(DataType::kInt64, {.a = {-5, i64max, p40, -3},
                                                .b = {3, 1, p30, 7},
                                                .sum = {-2, i64min, p40 + p30, 4},
                                                .min = {-5, 1, p30, -3},
                                                .max = {3, i64max, p40, 7},
                                                .product = {-15, i64max, 0, -21}});  // 2^70 wraps

  // The example, alone: int8 100 + 100 wraps to -56.
  const auto sum8 = hvd::runtime::reduce_fn(DataType::kInt8, ReduceOp::kSum);
  REQUIRE(sum8 != nullptr);
  std::int8_t x = 100;
  const std::int8_t y = 100;
  sum8(&x, &x, &y, 1);
  CHECK(x == -56);
}

TEST_CASE("reduce_fn: floating-point kernels", "[libhvd]") {
  const Case<double> c{.a = {1.5, -2, 0.25, 3},
                       .b = {2, -3, -0.5, 3},
                       .sum = {3.5, -5, -0.25, 6},
                       .min = {1.5, -3, -0.5, 3},
                       .max = {2, -2, 0.25, 3},
                       .product = {3, 6, -0.125, 9}};
  check_native<double>(DataType::kFloat64, c);
  auto to_f = [](const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); };
  check_native<float>(DataType::kFloat32, {.a = to_f(c.a),
                                           .b = to_f(c.b),
                                           .sum = to_f(c.sum),
                                           .min = to_f(c.min),
                                           .max = to_f(c.max),
                                           .product = to_f(c.product)});
  check_half<float16, hvd::float16_from>(DataType::kFloat16, c);
  check_half<bfloat16, hvd::bfloat16_from>(DataType::kBFloat16, c);
}

namespace {
// The native kernels work in 64-byte blocks plus a tail: every length around a block boundary,
// with the output separate and in place on either input (Gloo reduces in place), must give what
// the kernel gives element by element.
template <class T>
void check_blocks(DataType dtype) {
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct}) {
    const auto fn = hvd::runtime::reduce_fn(dtype, op);
    REQUIRE(fn != nullptr);
    for (std::size_t n : {1u, 15u, 16u, 17u, 63u, 64u, 65u, 1000u}) {
      std::vector<T> a(n), b(n), want(n);
      for (std::size_t i = 0; i < n; ++i) {
        a[i] = static_cast<T>(static_cast<int>(i % 7) - 3);
        b[i] = static_cast<T>(static_cast<int>(i % 5) + 1);
        fn(&want[i], &a[i], &b[i], 1);
      }
      std::vector<T> out(n);
      fn(out.data(), a.data(), b.data(), n);
      CHECK(out == want);
      std::vector<T> in_a = a;
      fn(in_a.data(), in_a.data(), b.data(), n);
      CHECK(in_a == want);
      std::vector<T> in_b = b;
      fn(in_b.data(), a.data(), in_b.data(), n);
      CHECK(in_b == want);
    }
  }
}
}  // namespace

TEST_CASE("reduce_fn: block and tail agree, separate and in place", "[libhvd]") {
  check_blocks<std::uint8_t>(DataType::kUInt8);
  check_blocks<std::int8_t>(DataType::kInt8);
  check_blocks<std::int16_t>(DataType::kInt16);
  check_blocks<std::int32_t>(DataType::kInt32);
  check_blocks<std::int64_t>(DataType::kInt64);
  check_blocks<float>(DataType::kFloat32);
  check_blocks<double>(DataType::kFloat64);
}

TEST_CASE("reduce_fn: 16-bit results are rounded to nearest even", "[libhvd]") {
  const auto sum16 = hvd::runtime::reduce_fn(DataType::kFloat16, ReduceOp::kSum);
  REQUIRE(sum16 != nullptr);
  const float16 a[2] = {hvd::float16_from(2048.0f), hvd::float16_from(2048.0f)};
  const float16 b[2] = {hvd::float16_from(1.0f), hvd::float16_from(3.0f)};
  float16 out[2];
  sum16(out, a, b, 2);
  CHECK(out[0].bits == 0x6800);  // 2049 -> 2048
  CHECK(out[1].bits == 0x6802);  // 2051 -> 2052
  const float16 big[1] = {hvd::float16_from(65504.0f)};
  sum16(out, big, big, 1);
  CHECK(out[0].bits == 0x7C00);  // overflow -> inf

  const auto sumbf = hvd::runtime::reduce_fn(DataType::kBFloat16, ReduceOp::kSum);
  REQUIRE(sumbf != nullptr);
  const bfloat16 c[2] = {hvd::bfloat16_from(256.0f), hvd::bfloat16_from(256.0f)};
  const bfloat16 d[2] = {hvd::bfloat16_from(1.0f), hvd::bfloat16_from(3.0f)};
  bfloat16 outb[2];
  sumbf(outb, c, d, 2);
  CHECK(hvd::to_float(outb[0]) == 256.0f);  // 257 is a tie -> 256 (even)
  CHECK(hvd::to_float(outb[1]) == 260.0f);  // 259 is a tie -> 260 (even)
}

namespace {

// Bit equality, except that any NaN equals any NaN (the F16C path keeps a NaN's payload).
bool same_half(std::uint16_t got, std::uint16_t want) {
  const auto nan = [](std::uint16_t h) { return (h & 0x7C00u) == 0x7C00u && (h & 0x3FFu) != 0; };
  return nan(want) ? nan(got) : got == want;
}

// Every half bit pattern against a few others, through the kernel in one call (the vector path
// where the CPU has one, and a scalar tail of 5), against the conversions element by element.
template <class H>
void check_every_16bit(DataType dtype, float (*to)(H), H (*from)(float)) {
  const std::uint16_t others[] = {0x0000, 0x8001, 0x3C00, 0xC500, 0x7BFF, 0x03FF, 0x7C00};
  const std::size_t n = 0x10000 + 5;
  std::vector<H> a(n), b(n), out(n);
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct}) {
    const auto fn = hvd::runtime::reduce_fn(dtype, op);
    REQUIRE(fn != nullptr);
    for (std::uint16_t other : others) {
      for (std::size_t i = 0; i < n; ++i) {
        a[i].bits = static_cast<std::uint16_t>(i);
        b[i].bits = other;
      }
      fn(out.data(), a.data(), b.data(), n);
      for (std::size_t i = 0; i < n; ++i) {
        const float x = to(a[i]), y = to(b[i]);
        float r = x + y;
        if (op == ReduceOp::kMin) r = std::min(x, y);
        if (op == ReduceOp::kMax) r = std::max(x, y);
        if (op == ReduceOp::kProduct) r = x * y;
        INFO("op " << static_cast<int>(op) << ", " << a[i].bits << " with " << other);
        REQUIRE(same_half(out[i].bits, from(r).bits));
      }
    }
  }
  for (double factor : {0.5, 0.1, 1.0 / 3, 1e-3}) {
    for (std::size_t i = 0; i < n; ++i) a[i].bits = static_cast<std::uint16_t>(i);
    hvd::runtime::scale(a.data(), n, dtype, factor);
    for (std::size_t i = 0; i < n; ++i) {
      H x;
      x.bits = static_cast<std::uint16_t>(i);
      INFO("scale " << factor << " of " << i);
      REQUIRE(same_half(a[i].bits, from(to(x) * static_cast<float>(factor)).bits));
    }
  }
}

}  // namespace

TEST_CASE("reduce_fn and scale: every 16-bit value, in blocks and the tail, as element by element",
          "[libhvd]") {
  // Both the CPU-specific kernels (F16C, AVX2, where this CPU has them) and the baseline code.
  struct Restore {
    ~Restore() { hvd::runtime::use_cpu_kernels(true); }
  } restore;
  for (const bool cpu : {true, false}) {
    hvd::runtime::use_cpu_kernels(cpu);
    INFO("kernels: " << hvd::runtime::cpu_kernels_in_use());
    check_every_16bit<float16>(DataType::kFloat16, hvd::to_float, hvd::float16_from);
    check_every_16bit<bfloat16>(DataType::kBFloat16, hvd::to_float, hvd::bfloat16_from);
  }
}

TEST_CASE("use_cpu_kernels(false) switches the 16-bit kernels to the baseline code", "[libhvd]") {
  struct Restore {
    ~Restore() { hvd::runtime::use_cpu_kernels(true); }
  } restore;
  const std::string in_use = hvd::runtime::cpu_kernels_in_use();
  const auto f16 = hvd::runtime::reduce_fn(DataType::kFloat16, ReduceOp::kSum);
  const auto bf16 = hvd::runtime::reduce_fn(DataType::kBFloat16, ReduceOp::kSum);
  hvd::runtime::use_cpu_kernels(false);
  CHECK(hvd::runtime::cpu_kernels_in_use() == "baseline");
  // Where the CPU has the features, the kernels differ: the test above ran both.
  CHECK((in_use.find("F16C") != std::string::npos) ==
        (hvd::runtime::reduce_fn(DataType::kFloat16, ReduceOp::kSum) != f16));
  CHECK((in_use.find("AVX2") != std::string::npos) ==
        (hvd::runtime::reduce_fn(DataType::kBFloat16, ReduceOp::kSum) != bf16));
  if (in_use == "baseline") WARN("this CPU has neither F16C nor AVX2: only the baseline ran");
}

TEST_CASE("reduce_fn: every valid pair has a kernel, average and invalid pairs have none",
          "[libhvd]") {
  for (DataType t : kAllDtypes) {
    INFO(hvd::dtype_name(t));
    for (ReduceOp op : kKernelOps) CHECK(hvd::runtime::reduce_fn(t, op) != nullptr);
    CHECK(hvd::runtime::reduce_fn(t, ReduceOp::kAverage) == nullptr);
  }
  CHECK(hvd::runtime::reduce_fn(static_cast<DataType>(99), ReduceOp::kSum) == nullptr);
  CHECK(hvd::runtime::reduce_fn(DataType::kFloat32, static_cast<ReduceOp>(7)) == nullptr);
  // Different ops give different kernels.
  CHECK(hvd::runtime::reduce_fn(DataType::kInt32, ReduceOp::kSum) !=
        hvd::runtime::reduce_fn(DataType::kInt32, ReduceOp::kProduct));
}

// ---- scale and divide_integers ----

TEST_CASE("scale: floating-point types, rounded back for 16-bit", "[libhvd]") {
  std::vector<float> f32 = {1.0f, -3.0f, 0.5f};
  hvd::runtime::scale(f32.data(), f32.size(), DataType::kFloat32, 0.25);
  CHECK(f32 == std::vector<float>{0.25f, -0.75f, 0.125f});
  f32 = {1.0f};
  hvd::runtime::scale(f32.data(), 1, DataType::kFloat32, 0.1);
  CHECK(f32[0] == 0.1f);

  std::vector<double> f64 = {1.0, -3.0, 10.0};
  hvd::runtime::scale(f64.data(), f64.size(), DataType::kFloat64, 0.1);
  CHECK(f64[0] == 0.1);  // computed in double: 0.1 exactly as double, not as float
  CHECK(f64[1] == -3.0 * 0.1);
  CHECK(f64[2] == 10.0 * 0.1);

  std::vector<float16> h = {hvd::float16_from(1.0f), hvd::float16_from(-6.0f),
                            hvd::float16_from(2048.0f)};
  hvd::runtime::scale(h.data(), h.size(), DataType::kFloat16, 0.5);
  CHECK(h[0].bits == f16_bits(0.5f));
  CHECK(h[1].bits == f16_bits(-3.0f));
  CHECK(h[2].bits == f16_bits(1024.0f));
  h = {hvd::float16_from(1.0f), hvd::float16_from(2047.0f)};
  hvd::runtime::scale(h.data(), h.size(), DataType::kFloat16, 0.1);
  CHECK(h[0].bits == 0x2E66);             // 0.1 rounded to half
  CHECK(hvd::to_float(h[1]) == 204.75f);  // 204.7 to the nearest 1/8 (half spacing at 128..256)
}

TEST_CASE("scale: 64-byte blocks and the tail agree with one element at a time", "[libhvd]") {
  // 37 elements: two float32 blocks of 16 and a tail of 5; four float64 blocks of 8 and 5.
  std::vector<float> f32(37);
  std::vector<double> f64(37);
  for (std::size_t i = 0; i < f32.size(); ++i) {
    f32[i] = static_cast<float>(i) * 1.5f - 20.0f;
    f64[i] = static_cast<double>(i) * 1.5 - 20.0;
  }
  std::vector<float> want32 = f32;
  std::vector<double> want64 = f64;
  for (auto& v : want32) v *= 0.3f;
  for (auto& v : want64) v *= 0.3;
  hvd::runtime::scale(f32.data(), f32.size(), DataType::kFloat32, 0.3);
  hvd::runtime::scale(f64.data(), f64.size(), DataType::kFloat64, 0.3);
  CHECK(f32 == want32);
  CHECK(f64 == want64);
  // An unaligned start: the blocks need no alignment.
  std::vector<float> odd(40, 2.0f);
  hvd::runtime::scale(odd.data() + 1, 38, DataType::kFloat32, 0.5);
  CHECK(odd.front() == 2.0f);
  CHECK(odd.back() == 2.0f);
  CHECK(std::all_of(odd.begin() + 1, odd.end() - 1, [](float v) { return v == 1.0f; }));
}

TEST_CASE("scale: bfloat16 and integer no-op", "[libhvd]") {
  std::vector<bfloat16> b = {hvd::bfloat16_from(1.0f), hvd::bfloat16_from(-6.0f)};
  hvd::runtime::scale(b.data(), b.size(), DataType::kBFloat16, 0.5);
  CHECK(hvd::to_float(b[0]) == 0.5f);
  CHECK(hvd::to_float(b[1]) == -3.0f);
  b = {hvd::bfloat16_from(1.0f)};
  hvd::runtime::scale(b.data(), 1, DataType::kBFloat16, 0.1);
  CHECK(b[0].bits == bf16_bits(0.1f));
  CHECK(b[0].bits == 0x3DCD);  // 0.1f = 0x3DCCCCCD: rounds up

  std::vector<std::int32_t> ints = {7, -7};
  hvd::runtime::scale(ints.data(), ints.size(), DataType::kInt32, 0.5);
  CHECK(ints == std::vector<std::int32_t>{7, -7});
  std::vector<std::int16_t> shorts = {7, -7};
  hvd::runtime::scale(shorts.data(), shorts.size(), DataType::kInt16, 0.5);
  CHECK(shorts == std::vector<std::int16_t>{7, -7});
}

TEST_CASE("divide_integers: truncates toward zero", "[libhvd]") {
  std::vector<std::int32_t> i32 = {-7, 7, -1, 6, std::numeric_limits<std::int32_t>::min()};
  hvd::runtime::divide_integers(i32.data(), i32.size(), DataType::kInt32, 2);
  CHECK(i32 ==
        std::vector<std::int32_t>{-3, 3, 0, 3, std::numeric_limits<std::int32_t>::min() / 2});

  std::vector<std::int64_t> i64 = {-(std::int64_t{1} << 40) - 1, 10};
  hvd::runtime::divide_integers(i64.data(), i64.size(), DataType::kInt64, 4);
  CHECK(i64 == std::vector<std::int64_t>{-(std::int64_t{1} << 38), 2});

  std::vector<std::int8_t> i8 = {-128, 127, -5};
  hvd::runtime::divide_integers(i8.data(), i8.size(), DataType::kInt8, 3);
  CHECK(i8 == std::vector<std::int8_t>{-42, 42, -1});

  std::vector<std::int16_t> i16 = {-32768, 32767, -5};
  hvd::runtime::divide_integers(i16.data(), i16.size(), DataType::kInt16, 3);
  CHECK(i16 == std::vector<std::int16_t>{-10922, 10922, -1});

  std::vector<std::uint8_t> u8 = {255, 1};
  hvd::runtime::divide_integers(u8.data(), u8.size(), DataType::kUInt8, 2);
  CHECK(u8 == std::vector<std::uint8_t>{127, 0});

  std::vector<float> f = {3.0f};  // floating types are scale()'s job: untouched
  hvd::runtime::divide_integers(f.data(), 1, DataType::kFloat32, 2);
  CHECK(f[0] == 3.0f);
}

// The divisor is the world size, which need not fit the element type: an int8 average over 200
// ranks must not divide by int8_t(200) = -56, nor a uint8 one over 256 ranks by zero.
TEST_CASE("divide_integers: a divisor wider than the element type", "[libhvd]") {
  std::vector<std::int8_t> i8 = {100, -100};
  hvd::runtime::divide_integers(i8.data(), i8.size(), DataType::kInt8, 200);
  CHECK(i8 == std::vector<std::int8_t>{0, 0});
  std::vector<std::uint8_t> u8 = {255, 7};
  hvd::runtime::divide_integers(u8.data(), u8.size(), DataType::kUInt8, 256);
  CHECK(u8 == std::vector<std::uint8_t>{0, 0});
  std::vector<std::int16_t> i16 = {32767, -32768, 20000};
  hvd::runtime::divide_integers(i16.data(), i16.size(), DataType::kInt16, 40000);
  CHECK(i16 == std::vector<std::int16_t>{0, 0, 0});
}
