#include "common/update_rules.h"

#include <cmath>
#include <string>

#include "common/errors.h"

namespace pstrain::update {

SgdCoefficients sgd_coefficients(double lr, double momentum, double weight_decay, bool nesterov) {
  return SgdCoefficients{static_cast<float>(lr), static_cast<float>(weight_decay), static_cast<float>(momentum),
                         nesterov};
}

AdamCoefficients adam_coefficients(double lr, double beta1, double beta2, double epsilon, double weight_decay,
                                   std::int64_t t) {
  if (t < 1) throw ComputeError("adam: step count t is " + std::to_string(t) + ", expected >= 1");
  const auto steps = static_cast<double>(t);
  const double correction1 = 1.0 - std::pow(beta1, steps);
  const double correction2 = 1.0 - std::pow(beta2, steps);
  AdamCoefficients c;
  c.step_size = static_cast<float>(lr / correction1);
  c.inv_sqrt_c2 = static_cast<float>(1.0 / std::sqrt(correction2));
  c.beta1 = static_cast<float>(beta1);
  c.beta2 = static_cast<float>(beta2);
  c.one_minus_beta1 = static_cast<float>(1.0 - beta1);
  c.one_minus_beta2 = static_cast<float>(1.0 - beta2);
  c.epsilon = static_cast<float>(epsilon);
  c.weight_decay = static_cast<float>(weight_decay);
  return c;
}

void sgd_update(float* w, const float* g, float* velocity, std::size_t num_elems, const SgdCoefficients& c) {
  if (velocity == nullptr && c.momentum != 0.0f && num_elems > 0) {
    throw ComputeError("sgd_step: momentum " + std::to_string(c.momentum) + " needs a velocity buffer, got null");
  }
  if (velocity == nullptr) {
    for (std::size_t i = 0; i < num_elems; ++i) w[i] = sgd_plain(w[i], g[i], c);
  } else if (c.nesterov) {
    SgdCoefficients k = c;
    k.nesterov = true;  // loop-invariant: one loop per variant
    for (std::size_t i = 0; i < num_elems; ++i) w[i] = sgd_momentum(w[i], g[i], velocity[i], k);
  } else {
    SgdCoefficients k = c;
    k.nesterov = false;
    for (std::size_t i = 0; i < num_elems; ++i) w[i] = sgd_momentum(w[i], g[i], velocity[i], k);
  }
}

void adam_update(float* w, const float* g, float* m, float* v, std::size_t num_elems, const AdamCoefficients& c) {
  for (std::size_t i = 0; i < num_elems; ++i) w[i] = adam(w[i], g[i], m[i], v[i], c);
}

}  // namespace pstrain::update
