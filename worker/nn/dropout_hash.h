// The dropout keep/drop decision as a pure function of (seed, index), shared
// by the CPU and CUDA backends so both draw the same mask. Counter-based
// (SplitMix64 finalizer): no RNG state, any element computable independently.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define PSTRAIN_HOST_DEVICE __host__ __device__
#else
#define PSTRAIN_HOST_DEVICE
#endif

namespace pstrain::nn {

// Uniform in [0, 1) with 24 bits of resolution.
PSTRAIN_HOST_DEVICE inline float dropout_uniform(std::uint64_t seed, std::uint64_t index) {
  std::uint64_t z = seed + 0x9E3779B97F4A7C15ull * (index + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z = z ^ (z >> 31);
  return static_cast<float>(z >> 40) * (1.0f / 16777216.0f);
}

// The mask value of element `index`: 1/(1-p) when kept, 0 when dropped (p in [0, 1)).
PSTRAIN_HOST_DEVICE inline float dropout_mask_value(std::uint64_t seed, std::uint64_t index, float p) {
  return dropout_uniform(seed, index) < p ? 0.0f : 1.0f / (1.0f - p);
}

}  // namespace pstrain::nn
