// libhvd's engine-free parts: the 16-bit float conversions and the dtype helpers (the host
// reduction and scaling kernels: test_libhvd_kernels.cpp; read_config: test_libhvd_config.cpp).
#include "tests/support/catch.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "allreduce/api/status_error.h"
#include "allreduce/kernels/dtype.h"
#include "allreduce/kernels/kernels.h"
#include "common/error.h"
#include "hvd/hvd.hpp"
#include "tests/unit/libhvd_dtype_helpers.h"

using hvd::bfloat16;
using hvd::DataType;
using hvd::float16;
using hvd::ReduceOp;
using namespace hvd_test;

namespace {

float f16(std::uint16_t bits) { return hvd::to_float(float16{bits}); }
float bf16(std::uint16_t bits) { return hvd::to_float(bfloat16{bits}); }

bool is_f16_nan(std::uint16_t bits) { return (bits & 0x7C00u) == 0x7C00u && (bits & 0x3FFu) != 0; }

// The value of a binary16 bit pattern, computed independently in double.
double f16_reference(std::uint16_t bits) {
  const double sign = (bits & 0x8000u) != 0 ? -1.0 : 1.0;
  const int exp = (bits >> 10) & 0x1F;
  const int mant = bits & 0x3FF;
  if (exp == 0x1F) return sign * std::numeric_limits<double>::infinity();  // NaN handled apart
  if (exp == 0) return sign * std::ldexp(mant, -24);
  return sign * std::ldexp(1024 + mant, exp - 25);
}

}  // namespace

// ---- float16 ----

TEST_CASE("float16: every bit pattern converts exactly and round-trips", "[libhvd]") {
  for (std::uint32_t i = 0; i <= 0xFFFFu; ++i) {
    const auto bits = static_cast<std::uint16_t>(i);
    const float f = f16(bits);
    if (is_f16_nan(bits)) {
      INFO("bits " << i);
      REQUIRE(std::isnan(f));
      REQUIRE(std::isnan(f16(f16_bits(f))));
      REQUIRE(is_f16_nan(f16_bits(f)));
      continue;
    }
    INFO("bits " << i);
    REQUIRE(static_cast<double>(f) == f16_reference(bits));
    REQUIRE(std::signbit(f) == ((bits & 0x8000u) != 0));
    REQUIRE(f16_bits(f) == bits);
  }
  // Both signed zeros survive.
  CHECK(f16_bits(0.0f) == 0x0000);
  CHECK(f16_bits(-0.0f) == 0x8000);
  CHECK(std::signbit(f16(0x8000)));
}

TEST_CASE("float16: known values", "[libhvd]") {
  CHECK(f16_bits(1.0f) == 0x3C00);
  CHECK(f16(0x3C00) == 1.0f);
  CHECK(f16_bits(-2.0f) == 0xC000);
  CHECK(f16_bits(65504.0f) == 0x7BFF);
  CHECK(f16(0x7BFF) == 65504.0f);
  CHECK(f16(0x0001) == std::ldexp(1.0f, -24));  // smallest subnormal
  CHECK(f16_bits(std::ldexp(1.0f, -24)) == 0x0001);
  CHECK(f16(0x0400) == std::ldexp(1.0f, -14));  // smallest normal
  CHECK(f16_bits(65519.0f) == 0x7BFF);          // just below the max/inf midpoint
  CHECK(f16_bits(65520.0f) == 0x7C00);          // the midpoint rounds to infinity
  CHECK(f16_bits(-65520.0f) == 0xFC00);
  CHECK(f16_bits(1e10f) == 0x7C00);
  CHECK(f16_bits(std::numeric_limits<float>::infinity()) == 0x7C00);
  CHECK(f16_bits(-std::numeric_limits<float>::infinity()) == 0xFC00);
  CHECK(std::isinf(f16(0x7C00)));
  CHECK(f16_bits(0.1f) == 0x2E66);
  CHECK(is_f16_nan(f16_bits(std::numeric_limits<float>::quiet_NaN())));
  CHECK(is_f16_nan(f16_bits(std::bit_cast<float>(0x7F800001u))));  // low-payload NaN stays NaN
  CHECK(f16_bits(std::ldexp(1.0f, -26)) == 0x0000);                // underflow to zero
  CHECK(f16_bits(-std::ldexp(1.0f, -26)) == 0x8000);
}

TEST_CASE("float16: round to nearest even", "[libhvd]") {
  // Spacing is 2 in [2048, 4096).
  CHECK(f16_bits(2049.0f) == 0x6800);  // tie -> 2048 (even)
  CHECK(f16(0x6800) == 2048.0f);
  CHECK(f16_bits(2051.0f) == 0x6802);  // tie -> 2052 (even)
  CHECK(f16(0x6802) == 2052.0f);
  CHECK(f16_bits(std::nextafter(2049.0f, 3000.0f)) == 0x6801);  // above the tie: up
  CHECK(f16_bits(-2049.0f) == 0xE800);
  CHECK(f16_bits(std::ldexp(1.0f, -25)) == 0x0000);      // tie between 0 and 2^-24 -> 0
  CHECK(f16_bits(3 * std::ldexp(1.0f, -25)) == 0x0002);  // tie between 1 and 2 ulps -> 2

  // Every midpoint between adjacent finite halves (subnormals, the subnormal/normal boundary
  // and max/inf included): the tie goes to the even pattern, a float either side to its side.
  for (std::uint32_t lo = 0; lo < 0x7C00u; ++lo) {
    const auto lo16 = static_cast<std::uint16_t>(lo);
    const auto hi16 = static_cast<std::uint16_t>(lo + 1);
    const double mid = (f16_reference(lo16) + (hi16 == 0x7C00 ? 65536.0 : f16_reference(hi16))) / 2;
    const auto midf = static_cast<float>(mid);
    REQUIRE(static_cast<double>(midf) == mid);  // exact: 12 significant bits
    const std::uint16_t even = (lo & 1u) == 0 ? lo16 : hi16;
    INFO("between " << lo << " and " << lo + 1);
    for (int sign = 0; sign < 2; ++sign) {
      const float s = sign == 0 ? 1.0f : -1.0f;
      const auto sbit = static_cast<std::uint16_t>(sign == 0 ? 0 : 0x8000);
      REQUIRE(f16_bits(s * midf) == (even | sbit));
      REQUIRE(f16_bits(s * std::nextafter(midf, 0.0f)) == (lo16 | sbit));
      REQUIRE(f16_bits(s * std::nextafter(midf, 1e30f)) == (hi16 | sbit));
    }
  }
}

// ---- bfloat16 ----

TEST_CASE("bfloat16: every non-NaN bit pattern round-trips", "[libhvd]") {
  for (std::uint32_t i = 0; i <= 0xFFFFu; ++i) {
    const auto bits = static_cast<std::uint16_t>(i);
    const float f = bf16(bits);
    INFO("bits " << i);
    REQUIRE(std::bit_cast<std::uint32_t>(f) == (i << 16));  // the upper half of a float32
    if (std::isnan(f)) {
      REQUIRE(std::isnan(bf16(bf16_bits(f))));
      continue;
    }
    REQUIRE(bf16_bits(f) == bits);
  }
}

TEST_CASE("bfloat16: known values and round to nearest even", "[libhvd]") {
  CHECK(bf16_bits(1.0f) == 0x3F80);
  CHECK(bf16(0x3F80) == 1.0f);
  CHECK(bf16_bits(-2.0f) == 0xC000);
  CHECK(bf16_bits(-0.0f) == 0x8000);
  // 1.00390625 = 0x3F808000: a tie between 0x3F80 (even) and 0x3F81 -> 0x3F80.
  CHECK(bf16_bits(1.00390625f) == 0x3F80);
  // 1.01171875 = 0x3F818000: a tie between 0x3F81 and 0x3F82 (even) -> 0x3F82 = 1.015625.
  CHECK(bf16_bits(1.01171875f) == 0x3F82);
  CHECK(bf16(0x3F82) == 1.015625f);
  CHECK(bf16_bits(std::bit_cast<float>(0x3F808001u)) == 0x3F81);  // above the tie: up
  CHECK(bf16_bits(std::bit_cast<float>(0x3F817FFFu)) == 0x3F81);  // below the tie: down
  CHECK(bf16_bits(std::numeric_limits<float>::max()) == 0x7F80);  // rounds to infinity
  CHECK(bf16_bits(std::bit_cast<float>(0x7F7F7FFFu)) == 0x7F7F);
  CHECK(bf16_bits(std::numeric_limits<float>::infinity()) == 0x7F80);
  CHECK(bf16_bits(-std::numeric_limits<float>::infinity()) == 0xFF80);
  // A NaN whose payload is only in the dropped bits must not become infinity.
  CHECK(std::isnan(bf16(bf16_bits(std::bit_cast<float>(0x7F800001u)))));
  CHECK(std::isnan(bf16(bf16_bits(std::bit_cast<float>(0xFF800001u)))));
  CHECK(std::isnan(bf16(bf16_bits(std::numeric_limits<float>::quiet_NaN()))));

  // Every midpoint between adjacent finite bfloat16 values.
  for (std::uint32_t lo = 0; lo < 0x7F80u; ++lo) {
    const std::uint32_t mid = (lo << 16) | 0x8000u;
    const auto even = static_cast<std::uint16_t>((lo & 1u) == 0 ? lo : lo + 1);
    INFO("between " << lo << " and " << lo + 1);
    REQUIRE(bf16_bits(std::bit_cast<float>(mid)) == even);
    REQUIRE(bf16_bits(std::bit_cast<float>(mid - 1)) == lo);
    REQUIRE(bf16_bits(std::bit_cast<float>(mid + 1)) == lo + 1);
    REQUIRE(bf16_bits(std::bit_cast<float>(mid | 0x80000000u)) == (even | 0x8000u));
  }
}

// ---- dtype helpers ----

TEST_CASE("dtype: sizes, names, validity, describe", "[libhvd]") {
  using hvd::runtime::is_floating;
  using hvd::runtime::is_valid;
  CHECK(hvd::element_size(DataType::kUInt8) == 1);
  CHECK(hvd::element_size(DataType::kInt8) == 1);
  CHECK(hvd::element_size(DataType::kInt16) == 2);
  CHECK(hvd::element_size(DataType::kInt32) == 4);
  CHECK(hvd::element_size(DataType::kInt64) == 8);
  CHECK(hvd::element_size(DataType::kFloat16) == 2);
  CHECK(hvd::element_size(DataType::kBFloat16) == 2);
  CHECK(hvd::element_size(DataType::kFloat32) == 4);
  CHECK(hvd::element_size(DataType::kFloat64) == 8);
  CHECK(hvd::element_size(static_cast<DataType>(99)) == 0);

  CHECK(std::string(hvd::dtype_name(DataType::kUInt8)) == "uint8");
  CHECK(std::string(hvd::dtype_name(DataType::kInt8)) == "int8");
  CHECK(std::string(hvd::dtype_name(DataType::kInt16)) == "int16");
  CHECK(std::string(hvd::dtype_name(DataType::kInt32)) == "int32");
  CHECK(std::string(hvd::dtype_name(DataType::kInt64)) == "int64");
  CHECK(std::string(hvd::dtype_name(DataType::kFloat16)) == "float16");
  CHECK(std::string(hvd::dtype_name(DataType::kBFloat16)) == "bfloat16");
  CHECK(std::string(hvd::dtype_name(DataType::kFloat32)) == "float32");
  CHECK(std::string(hvd::dtype_name(DataType::kFloat64)) == "float64");
  CHECK(std::string(hvd::dtype_name(static_cast<DataType>(-1))) == "invalid dtype");

  CHECK(std::string(hvd::op_name(ReduceOp::kSum)) == "sum");
  CHECK(std::string(hvd::op_name(ReduceOp::kAverage)) == "average");
  CHECK(std::string(hvd::op_name(ReduceOp::kMin)) == "min");
  CHECK(std::string(hvd::op_name(ReduceOp::kMax)) == "max");
  CHECK(std::string(hvd::op_name(ReduceOp::kProduct)) == "product");
  CHECK(std::string(hvd::op_name(static_cast<ReduceOp>(5))) == "invalid op");

  for (DataType t : kAllDtypes) {
    INFO(hvd::dtype_name(t));
    CHECK(is_valid(t));
    const bool floating = t == DataType::kFloat16 || t == DataType::kBFloat16 ||
                          t == DataType::kFloat32 || t == DataType::kFloat64;
    CHECK(is_floating(t) == floating);
  }
  // int16 was appended as 8 (the C ABI's values never change); 9 is one past the last.
  CHECK(static_cast<int>(DataType::kInt16) == 8);
  CHECK(static_cast<int>(DataType::kFloat64) == 7);
  CHECK(hvd::runtime::kMaxDtype == HVD_INT16);
  CHECK(hvd::dtype_of<std::int16_t>::value == DataType::kInt16);
  CHECK(hvd::tensor(static_cast<std::int16_t*>(nullptr), 3).dtype == DataType::kInt16);
  CHECK_FALSE(is_valid(static_cast<DataType>(9)));
  CHECK_FALSE(is_valid(static_cast<DataType>(-1)));
  for (ReduceOp op : kKernelOps) CHECK(is_valid(op));
  CHECK(is_valid(ReduceOp::kAverage));
  CHECK_FALSE(is_valid(static_cast<ReduceOp>(5)));
  CHECK_FALSE(is_valid(static_cast<ReduceOp>(-1)));

  hvd::Tensor t{nullptr, DataType::kFloat32, {2, 3}};
  CHECK(hvd::runtime::describe(t) == "float32 tensor of shape [2, 3]");
  t.dtype = DataType::kBFloat16;
  t.shape = {};
  t.device = hvd::Device::cuda(1);
  CHECK(hvd::runtime::describe(t) == "bfloat16 tensor of shape [] on CUDA device 1");
}
