// The GPU's float32 <-> bfloat16 conversion (worker/nn/cuda/bf16_convert.h)
// against common/base/bfloat16.h, bit for bit: random values, ties (both
// directions), values that round up into the next exponent and into Inf,
// NaNs (quiet and signalling, both signs), +-Inf, +-0, subnormals.
// Skipped, with the reason printed, when no CUDA device is present.
#include <doctest/doctest.h>

#include <bit>
#include <cstdint>
#include <limits>
#include <vector>

#include "common/base/bfloat16.h"
#include "parity_harness.h"
#if defined(PSTRAIN_HAVE_CUDA)
#include "worker/nn/cuda/bf16_convert.h"
#endif

namespace pstrain::nn::parity {
namespace {

std::vector<float> conversion_cases() {
  std::vector<float> v = random_floats(100003, 11);  // not a multiple of any block size
  for (float& x : v) x *= 1e3f;
  const std::vector<std::uint32_t> bits = {
      0x3f808000u,  // a tie, even below: stays
      0x3f818000u,  // a tie, odd below: rounds up
      0x3f80ffffu,  // rounds up
      0x3fffffffu,  // rounds into the next exponent
      0x7f7fffffu,  // float32's largest: rounds to Inf
      0xff7fffffu,
      0x7f800000u, 0xff800000u,  // +-Inf
      0x7fc00000u, 0xffc00000u,  // quiet NaNs
      0x7f800001u, 0xff800001u,  // signalling NaNs: quieted, never Inf
      0x7fffffffu,
      0x00000000u, 0x80000000u,  // +-0
      0x00000001u, 0x007fffffu, 0x807fffffu,  // subnormals
  };
  for (std::uint32_t b : bits) v.push_back(std::bit_cast<float>(b));
  return v;
}

TEST_CASE("bfloat16 conversion on the GPU: bit for bit the host's, both ways") {
  auto b = backends_or_skip();
  if (!b) return;
#if defined(PSTRAIN_HAVE_CUDA)
  const std::vector<float> values = conversion_cases();
  const std::size_t n = values.size();
  Buffer src = Buffer::from(*b->cuda, values);
  Buffer narrow(*b->cuda, n * sizeof(std::uint16_t));
  Buffer wide(*b->cuda, n * sizeof(float));
  auto* narrowed = reinterpret_cast<std::uint16_t*>(narrow.f32());
  cuda::narrow_to_bfloat16(*b->cuda, src.f32(), narrowed, n);
  cuda::widen_from_bfloat16(*b->cuda, narrowed, wide.f32(), n);
  b->cuda->synchronize();
  const std::vector<std::uint16_t> got = narrow.to_host<std::uint16_t>();
  const std::vector<float> widened = wide.to_host<float>();
  std::size_t narrow_mismatches = 0, widen_mismatches = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint16_t want = to_bfloat16(values[i]);
    if (got[i] != want && narrow_mismatches++ < 5) MESSAGE("narrow " << i << ": got " << got[i] << " want " << want);
    if (std::bit_cast<std::uint32_t>(widened[i]) != std::bit_cast<std::uint32_t>(from_bfloat16(want))) ++widen_mismatches;
  }
  CHECK(narrow_mismatches == 0);
  CHECK(widen_mismatches == 0);
#endif
}

}  // namespace
}  // namespace pstrain::nn::parity
