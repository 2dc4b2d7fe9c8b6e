#include "common/base/bfloat16.h"

namespace pstrain {

// Plain loops over raw pointers: each vectorizes (the NaN test becomes a blend).
void to_bfloat16(std::span<const float> from, std::span<std::uint16_t> to) {
  const float* src = from.data();
  std::uint16_t* dst = to.data();
  const std::size_t n = from.size() < to.size() ? from.size() : to.size();
  for (std::size_t i = 0; i < n; ++i) dst[i] = to_bfloat16(src[i]);
}

void from_bfloat16(std::span<const std::uint16_t> from, std::span<float> to) {
  const std::uint16_t* src = from.data();
  float* dst = to.data();
  const std::size_t n = from.size() < to.size() ? from.size() : to.size();
  for (std::size_t i = 0; i < n; ++i) dst[i] = from_bfloat16(src[i]);
}

void round_to_bfloat16(std::span<float> values) {
  for (float& v : values) v = from_bfloat16(to_bfloat16(v));
}

}  // namespace pstrain
