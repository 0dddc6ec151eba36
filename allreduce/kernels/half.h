// The 16-bit float conversions as inline functions, for the kernels' loops: hvd::to_float and
// friends (hvd.hpp, exported) are calls through the library's PLT, which no loop can inline.
// Both are these same functions (dtype.cpp calls them), so the results are the same bits.
#pragma once

#include <bit>
#include <cstdint>

#include "hvd/hvd.hpp"

namespace hvd::runtime {

// `yes` where `condition`, else `no`, with masks: the compiler keeps a ?: of this kind as a
// branch in some loops, and a branch stops the vectorizer.
inline std::uint32_t select(bool condition, std::uint32_t yes, std::uint32_t no) {
  const std::uint32_t mask = 0u - static_cast<std::uint32_t>(condition);
  return (yes & mask) | (no & ~mask);
}

// IEEE binary16 -> binary32: exact for every half value. No branches (selects only), so a loop
// over a block of them vectorizes.
inline float half_to_float(float16 value) {
  const std::uint32_t h = value.bits;
  const std::uint32_t shifted = (h & 0x7FFFu) << 13;    // exponent and mantissa, in place
  const std::uint32_t exp = shifted & 0x0F800000u;      // the half's exponent field, shifted
  const std::uint32_t normal = shifted + (112u << 23);  // rebias 15 -> 127
  const std::uint32_t special = normal + (112u << 23);  // inf or NaN: exponent all ones
  // Zero or subnormal: the mantissa m as the float 2^-14 * (1 + m/1024), minus 2^-14 = m * 2^-24.
  const float sub = std::bit_cast<float>(normal + (1u << 23)) - std::bit_cast<float>(113u << 23);
  std::uint32_t bits = select(exp == 0x0F800000u, special, normal);
  bits = select(exp == 0, std::bit_cast<std::uint32_t>(sub), bits);
  return std::bit_cast<float>(bits | ((h & 0x8000u) << 16));
}

// binary32 -> binary16, round to nearest even; NaN becomes the quiet NaN 0x7E00 (with its
// sign), overflow infinity. No branches, as above.
inline float16 half_from_float(float value) {
  const std::uint32_t f = std::bit_cast<std::uint32_t>(value);
  const std::uint32_t sign = (f >> 16) & 0x8000u;
  const std::uint32_t abs = f & 0x7FFFFFFFu;
  // Normal: rebias the exponent, round the 13 dropped mantissa bits to nearest even.
  const std::uint32_t normal = (abs - (112u << 23) + 0xFFFu + ((abs >> 13) & 1u)) >> 13;
  // Subnormal or zero: adding 0.5 puts the half's mantissa, rounded to nearest even by the
  // float addition, in the low bits.
  const std::uint32_t sub =
      std::bit_cast<std::uint32_t>(std::bit_cast<float>(abs) + 0.5f) - 0x3F000000u;
  std::uint32_t out = select(abs < 0x38800000u, sub, normal);
  out = select(abs >= 0x47800000u, 0x7C00u, out);  // overflow: inf
  out = select(abs > 0x7F800000u, 0x7E00u, out);   // NaN
  return {static_cast<std::uint16_t>(sign | out)};
}

inline float bf16_to_float(bfloat16 value) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(value.bits) << 16);
}

// binary32 -> bfloat16, round to nearest even; NaN stays a (quiet) NaN. No branches, as above.
inline bfloat16 bf16_from_float(float value) {
  const std::uint32_t f = std::bit_cast<std::uint32_t>(value);
  const std::uint32_t rounded = (f + 0x7FFFu + ((f >> 16) & 1u)) >> 16;
  const std::uint32_t quiet_nan = (f >> 16) | 0x40u;
  return {static_cast<std::uint16_t>(select((f & 0x7FFFFFFFu) > 0x7F800000u, quiet_nan, rounded))};
}

}  // namespace hvd::runtime
