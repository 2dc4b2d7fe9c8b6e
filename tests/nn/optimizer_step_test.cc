// Backend::sgd_step / adam_step and DeviceOptimizer against the shared host
// optimizer (common/math/optimizer.h), plus their validation.
#include <doctest/doctest.h>

#include <cmath>

#include "common/base/errors.h"
#include "common/math/optimizer.h"
#include "common/math/update_rules.h"
#include "nn_test_util.h"
#include "worker/nn/device_optimizer.h"

namespace pstrain::nn {
namespace {

using testing::random_values;

OptimizerConfig sgd_config(double momentum, bool nesterov, double weight_decay) {
  OptimizerConfig c;
  c.name = "sgd";
  c.momentum = momentum;
  c.nesterov = nesterov;
  c.weight_decay = weight_decay;
  return c;
}

OptimizerConfig adam_config(double weight_decay) {
  OptimizerConfig c;
  c.name = "adam";
  c.weight_decay = weight_decay;
  return c;
}

// Runs `steps` updates with both optimizers from the same start and gradients.
void compare_with_host(const OptimizerConfig& config, double max_rel_diff) {
  auto backend = make_cpu_backend(1);
  const std::size_t n = 1000;
  auto host_w = random_values(n, 1);
  auto host = make_optimizer(config, static_cast<std::int64_t>(n));
  DeviceBuffer w = testing::device_copy(*backend, host_w);
  DeviceOptimizer device(config, *backend, static_cast<std::int64_t>(n));
  for (int step = 0; step < 5; ++step) {
    const auto g = random_values(n, 100 + static_cast<std::uint64_t>(step));
    DeviceBuffer g_dev = testing::device_copy(*backend, g);
    const double lr = 0.05 / (step + 1);
    host->step(host_w, g, lr);
    device.step(w.f32(), g_dev.f32(), lr);
  }
  CHECK(device.steps_taken() == 5);
  std::vector<float> got(n);
  w.download<float>(got);
  if (max_rel_diff == 0.0) {
    CHECK(got == host_w);
  } else {
    testing::check_close("device vs host optimizer", got.data(), host_w.data(), n, max_rel_diff);
  }
}

TEST_CASE("device SGD is bit-identical to the host optimizer") {
  compare_with_host(sgd_config(0.0, false, 0.0), 0.0);
  compare_with_host(sgd_config(0.9, false, 1e-4), 0.0);
  compare_with_host(sgd_config(0.9, true, 5e-4), 0.0);
}

TEST_CASE("device Adam is bit-identical to the host optimizer") {
  // Both run common/math/update_rules.h with coefficients from one function; the
  // backend once computed 1 - beta1 in float (0.10000002384 for 0.9) where the
  // servers computed it in double (0.10000000149), and the modes parted at step 1.
  compare_with_host(adam_config(0.0), 0.0);
  compare_with_host(adam_config(1e-3), 0.0);
  OptimizerConfig odd = adam_config(1e-4);
  odd.beta1 = 0.85;
  odd.beta2 = 0.98;
  odd.epsilon = 1e-6;
  compare_with_host(odd, 0.0);
}

TEST_CASE("Adam's coefficients: 1 - beta in double, bias corrections of step t") {
  const update::AdamCoefficients c = update::adam_coefficients(0.01, 0.9, 0.999, 1e-8, 0.0, 1);
  CHECK(c.one_minus_beta1 == static_cast<float>(1.0 - 0.9));
  CHECK(c.one_minus_beta1 != 1.0f - static_cast<float>(0.9));
  CHECK(c.step_size == static_cast<float>(0.01 / (1.0 - 0.9)));
  CHECK(c.inv_sqrt_c2 == static_cast<float>(1.0 / std::sqrt(1.0 - 0.999)));
  // One step from m = v = 0 moves every weight by about lr, against the gradient's sign.
  float w = 1.0f, m = 0.0f, v = 0.0f;
  w = update::adam(w, 0.5f, m, v, c);
  CHECK(w == doctest::Approx(0.99).epsilon(1e-5));
}

TEST_CASE("sgd_step follows the formula by hand") {
  auto backend = make_cpu_backend(1);
  float w = 1.0f, v = 0.5f;
  const float g = 2.0f;
  backend->sgd_step(&w, &g, &v, 1, update::sgd_coefficients(0.1, 0.9, 0.01, true));
  // g' = 2 + 0.01 = 2.01; v = 0.45 + 2.01 = 2.46; d = 2.01 + 0.9 * 2.46 = 4.224; w = 1 - 0.4224
  CHECK(v == doctest::Approx(2.46));
  CHECK(w == doctest::Approx(0.5776));
}

TEST_CASE("optimizer steps reject bad arguments") {
  auto backend = make_cpu_backend(1);
  float w = 1.0f, g = 1.0f;
  CHECK_THROWS_WITH_AS(backend->sgd_step(&w, &g, nullptr, 1, update::sgd_coefficients(0.1, 0.9, 0.0, false)),
                       "sgd_step: momentum 0.900000 needs a velocity buffer, got null", ComputeError);
  CHECK_THROWS_WITH_AS(update::adam_coefficients(0.1, 0.9, 0.999, 1e-8, 0.0, 0),
                       "adam: step count t is 0, expected >= 1", ComputeError);
  OptimizerConfig unknown;
  unknown.name = "rmsprop";
  CHECK_THROWS_WITH_AS(DeviceOptimizer(unknown, *backend, 4),
                       "optimizer: name: expected one of \"sgd\", \"adam\", got \"rmsprop\"", ConfigError);
  CHECK_THROWS_WITH_AS(DeviceOptimizer(sgd_config(0.9, false, 0.0), *backend, -1),
                       "device optimizer: num_elems: expected >= 0, got -1", ConfigError);
  DeviceOptimizer ok(sgd_config(0.9, false, 0.0), *backend, 1);
  CHECK_THROWS_WITH_AS(ok.step(&w, &g, -1.0),
                       "device optimizer step: lr: expected a finite number >= 0, got -1.000000", ConfigError);
}

}  // namespace
}  // namespace pstrain::nn
