#include "worker/nn/weight_init.h"

#include <cmath>

namespace pstrain::nn {

float init_bound(WeightInit init, std::int64_t fan_in, std::int64_t fan_out) {
  const double denom = init == WeightInit::kHe ? static_cast<double>(fan_in) : static_cast<double>(fan_in + fan_out);
  return static_cast<float>(std::sqrt(6.0 / denom));
}

void fill_uniform(std::mt19937_64& rng, float bound, std::span<float> values) {
  for (float& v : values) {
    const float u = static_cast<float>(rng() >> 40) * (1.0f / 16777216.0f);  // [0, 1), 24 bits
    v = (2.0f * u - 1.0f) * bound;
  }
}

}  // namespace pstrain::nn
