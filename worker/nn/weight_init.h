// Host-side weight initialization from a std::mt19937_64, specified bit for
// bit (no std:: distributions, whose output differs between standard
// libraries): each value is (2u - 1) * bound with u = (rng() >> 40) / 2^24.
// So the same seed gives the same parameters on every platform and for the
// CPU and CUDA backends alike. Pure functions of their arguments.
#pragma once

#include <cstdint>
#include <random>
#include <span>

#include "worker/nn/model_spec.h"

namespace pstrain::nn {

// Bound of the uniform distribution for the scheme (see model_spec.h).
float init_bound(WeightInit init, std::int64_t fan_in, std::int64_t fan_out);
// Fills `values` with uniform(-bound, bound) draws.
void fill_uniform(std::mt19937_64& rng, float bound, std::span<float> values);

}  // namespace pstrain::nn
