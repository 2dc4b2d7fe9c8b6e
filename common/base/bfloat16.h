// bfloat16 on the wire (ps.wire_dtype = "bfloat16"): the upper 16 bits of a
// float32 (sign, the full 8-bit exponent, 7 mantissa bits), so its range is
// float32's and its relative precision 2^-8. Narrowing rounds to nearest,
// ties to even; NaN stays NaN (made quiet, never rounded into Inf) and +-Inf
// stay +-Inf, so a receiver's finite check sees every non-finite value the
// sender had. Finite values above bfloat16's largest (about 3.39e38) round to
// Inf, as IEEE rounding does. Widening is exact.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>

namespace pstrain {

inline std::uint16_t to_bfloat16(float value) {
  const auto bits = std::bit_cast<std::uint32_t>(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((bits >> 16) | 0x0040u);  // quiet NaN
  const std::uint32_t round = 0x7fffu + ((bits >> 16) & 1u);  // ties to even
  return static_cast<std::uint16_t>((bits + round) >> 16);
}

inline float from_bfloat16(std::uint16_t value) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(value) << 16);
}

// Element-wise over whole spans (sizes must match; checked by the callers).
void to_bfloat16(std::span<const float> from, std::span<std::uint16_t> to);
void from_bfloat16(std::span<const std::uint16_t> from, std::span<float> to);
// Rounds `values` in place to the nearest bfloat16 (what a receiver of them
// in bfloat16 sees, widened back).
void round_to_bfloat16(std::span<float> values);

}  // namespace pstrain
