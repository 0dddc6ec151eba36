#include "allreduce/kernels/dtype.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <bit>
#include <cstring>

namespace hvd {

// IEEE binary16 <-> binary32, exact for every half value, round-to-nearest-even the other way.
float to_float(float16 value) {
  const std::uint32_t h = value.bits;
  const std::uint32_t sign = (h & 0x8000u) << 16;
  std::uint32_t exp = (h >> 10) & 0x1Fu;
  std::uint32_t mant = h & 0x3FFu;
  std::uint32_t bits;
  if (exp == 0x1F) {  // inf or NaN
    bits = sign | 0x7F800000u | (mant << 13);
  } else if (exp != 0) {  // normal
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {  // zero
    bits = sign;
  } else {  // subnormal: normalise
    exp = 113;
    while ((mant & 0x400u) == 0) {
      mant <<= 1;
      --exp;
    }
    bits = sign | (exp << 23) | ((mant & 0x3FFu) << 13);
  }
  return std::bit_cast<float>(bits);
}

float16 float16_from(float value) {
  const std::uint32_t f = std::bit_cast<std::uint32_t>(value);
  const std::uint32_t sign = (f >> 16) & 0x8000u;
  const std::uint32_t abs = f & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return {static_cast<std::uint16_t>(sign | 0x7E00u)};   // NaN
  if (abs >= 0x47800000u) return {static_cast<std::uint16_t>(sign | 0x7C00u)};  // overflow: inf
  if (abs < 0x38800000u) {  // half subnormal or zero: value * 2^24 rounded
    const float scaled = std::bit_cast<float>(abs) * 16777216.0f;  // exact power-of-two scaling
    const float rounded = scaled + 12582912.0f - 12582912.0f;      // round to nearest even
    return {static_cast<std::uint16_t>(sign | static_cast<std::uint32_t>(rounded))};
  }
  // Normal: rebias the exponent, round the 13 dropped mantissa bits to nearest even.
  const std::uint32_t rebased = abs - (112u << 23);
  const std::uint32_t round = 0xFFFu + ((rebased >> 13) & 1u);
  return {static_cast<std::uint16_t>(sign | ((rebased + round) >> 13))};
}

float to_float(bfloat16 value) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(value.bits) << 16);
}

bfloat16 bfloat16_from(float value) {
  const std::uint32_t f = std::bit_cast<std::uint32_t>(value);
  if ((f & 0x7FFFFFFFu) > 0x7F800000u) {
    return {static_cast<std::uint16_t>((f >> 16) | 0x40u)};  // quiet NaN
  }
  const std::uint32_t round = 0x7FFFu + ((f >> 16) & 1u);
  return {static_cast<std::uint16_t>((f + round) >> 16)};
}

std::size_t element_size(DataType dtype) {
  switch (dtype) {
    case DataType::kUInt8:
    case DataType::kInt8:
      return 1;
    case DataType::kFloat16:
    case DataType::kBFloat16:
      return 2;
    case DataType::kInt32:
    case DataType::kFloat32:
      return 4;
    case DataType::kInt64:
    case DataType::kFloat64:
      return 8;
  }
  return 0;
}

const char* dtype_name(DataType dtype) {
  switch (dtype) {
    case DataType::kUInt8:
      return "uint8";
    case DataType::kInt8:
      return "int8";
    case DataType::kInt32:
      return "int32";
    case DataType::kInt64:
      return "int64";
    case DataType::kFloat16:
      return "float16";
    case DataType::kBFloat16:
      return "bfloat16";
    case DataType::kFloat32:
      return "float32";
    case DataType::kFloat64:
      return "float64";
  }
  return "invalid dtype";
}

const char* op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kAverage:
      return "average";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kProduct:
      return "product";
  }
  return "invalid op";
}

namespace runtime {

bool is_floating(DataType dtype) {
  return dtype == DataType::kFloat16 || dtype == DataType::kBFloat16 ||
         dtype == DataType::kFloat32 || dtype == DataType::kFloat64;
}

bool is_valid(DataType dtype) { return element_size(dtype) != 0; }

bool is_valid(ReduceOp op) {
  const int v = static_cast<int>(op);
  return v >= HVD_SUM && v <= HVD_PRODUCT;
}

std::string describe(const Tensor& t) {
  return fmt::format("{} tensor of shape [{}]{}", dtype_name(t.dtype), fmt::join(t.shape, ", "),
                     t.device.kind == Device::Kind::kCUDA
                         ? fmt::format(" on CUDA device {}", t.device.id)
                         : std::string());
}

}  // namespace runtime
}  // namespace hvd
