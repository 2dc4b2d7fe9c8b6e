// Optimizers against hand-computed steps (formulas in common/math/optimizer.h),
// against a double-precision reference over many elements, and their checks.
#include "common/math/optimizer.h"

#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "common/config/config.h"
#include "common/base/errors.h"

namespace pstrain {
namespace {

OptimizerConfig sgd(double lr, double momentum, double weight_decay = 0.0, bool nesterov = false) {
  return OptimizerConfig{
      .name = "sgd", .lr = lr, .momentum = momentum, .weight_decay = weight_decay, .nesterov = nesterov};
}

OptimizerConfig adam(double lr, double weight_decay = 0.0) {
  return OptimizerConfig{.name = "adam", .lr = lr, .weight_decay = weight_decay};
}

// Runs one step per gradient on w (one element each) and returns the ws after each step.
std::vector<float> trajectory(const OptimizerConfig& config, float w0, const std::vector<float>& grads) {
  auto opt = make_optimizer(config, 1);
  std::vector<float> w{w0};
  std::vector<float> out;
  for (const float g : grads) {
    const std::vector<float> grad{g};
    opt->step(w, grad, config.lr);
    out.push_back(w[0]);
  }
  return out;
}

TEST_CASE("plain SGD: w -= lr * g") {
  auto opt = make_optimizer(sgd(0.1, 0.0), 2);
  std::vector<float> w{1.0f, -2.0f};
  const std::vector<float> g{0.5f, 0.25f};
  opt->step(w, g, 0.1);
  CHECK(w[0] == doctest::Approx(0.95).epsilon(1e-6));
  CHECK(w[1] == doctest::Approx(-2.025).epsilon(1e-6));
  CHECK(opt->steps_taken() == 1);
  CHECK(opt->num_elems() == 2);
}

TEST_CASE("SGD momentum: v = mu v + g, w -= lr v") {
  const auto ws = trajectory(sgd(0.1, 0.9), 1.0f, {1.0f, 1.0f, 1.0f});
  CHECK(ws[0] == doctest::Approx(0.9).epsilon(1e-6));    // v = 1
  CHECK(ws[1] == doctest::Approx(0.71).epsilon(1e-6));   // v = 1.9
  CHECK(ws[2] == doctest::Approx(0.439).epsilon(1e-6));  // v = 2.71
}

TEST_CASE("SGD Nesterov: w -= lr (g + mu v)") {
  const auto ws = trajectory(sgd(0.1, 0.9, 0.0, true), 1.0f, {1.0f, 1.0f});
  CHECK(ws[0] == doctest::Approx(0.81).epsilon(1e-6));   // v = 1, d = 1.9
  CHECK(ws[1] == doctest::Approx(0.539).epsilon(1e-6));  // v = 1.9, d = 2.71
}

TEST_CASE("SGD weight decay adds wd * w to the gradient") {
  const auto ws = trajectory(sgd(0.1, 0.9, 0.1), 1.0f, {0.0f, 0.0f});
  CHECK(ws[0] == doctest::Approx(0.99).epsilon(1e-6));    // g' = 0.1, v = 0.1
  CHECK(ws[1] == doctest::Approx(0.9711).epsilon(1e-6));  // g' = 0.099, v = 0.189
  const auto plain = trajectory(sgd(0.5, 0.0, 0.2), 2.0f, {1.0f});
  CHECK(plain[0] == doctest::Approx(2.0 - 0.5 * (1.0 + 0.4)).epsilon(1e-6));
}

TEST_CASE("Adam bias correction: the first steps move by about lr") {
  // Step 1: m = 0.1, v = 0.001, m^ = 1, v^ = 1 -> w = 1 - 0.1 / (1 + 1e-8).
  // Step 2 (g = -1): m = -0.01, v = 0.001999, m^ = -0.01 / 0.19, v^ = 1.
  const auto ws = trajectory(adam(0.1), 1.0f, {1.0f, -1.0f});
  CHECK(ws[0] == doctest::Approx(0.9).epsilon(1e-6));
  CHECK(ws[1] == doctest::Approx(0.9 + 0.1 * 0.01 / 0.19).epsilon(1e-6));
  const auto constant = trajectory(adam(0.1), 1.0f, {0.5f, 0.5f, 0.5f});
  CHECK(constant[0] == doctest::Approx(0.9).epsilon(1e-6));
  CHECK(constant[1] == doctest::Approx(0.8).epsilon(1e-6));
  CHECK(constant[2] == doctest::Approx(0.7).epsilon(1e-6));
}

TEST_CASE("Adam weight decay is L2 added to the gradient") {
  const auto ws = trajectory(adam(0.1, 0.5), 2.0f, {0.0f});  // g' = 1 -> moves by lr
  CHECK(ws[0] == doctest::Approx(1.9).epsilon(1e-6));
}

// Double-precision transcription of optimizer.h's formulas.
struct Reference {
  OptimizerConfig c;
  std::vector<double> w, m, v;
  int t = 0;
  void step(const std::vector<float>& g, double lr) {
    ++t;
    for (std::size_t i = 0; i < w.size(); ++i) {
      const double gi = g[i] + c.weight_decay * w[i];
      if (c.name == "sgd") {
        m[i] = c.momentum * m[i] + gi;
        w[i] -= lr * (c.momentum == 0.0 ? gi : c.nesterov ? gi + c.momentum * m[i] : m[i]);
      } else {
        m[i] = c.beta1 * m[i] + (1 - c.beta1) * gi;
        v[i] = c.beta2 * v[i] + (1 - c.beta2) * gi * gi;
        const double m_hat = m[i] / (1 - std::pow(c.beta1, t));
        const double v_hat = v[i] / (1 - std::pow(c.beta2, t));
        w[i] -= lr * m_hat / (std::sqrt(v_hat) + c.epsilon);
      }
    }
  }
};

TEST_CASE("many elements (not a multiple of the vector width) match a double reference") {
  const std::int64_t n = 1037;
  for (const OptimizerConfig& config :
       {sgd(0.05, 0.0, 1e-3), sgd(0.05, 0.9, 1e-3), sgd(0.05, 0.9, 1e-3, true), adam(0.01, 1e-3)}) {
    CAPTURE(config.name);
    CAPTURE(config.nesterov);
    std::mt19937 rng(7);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> w(n);
    for (float& x : w) x = dist(rng);
    Reference ref{config, std::vector<double>(w.begin(), w.end()), std::vector<double>(n),
                  std::vector<double>(n)};
    auto opt = make_optimizer(config, n);
    std::vector<float> g(n);
    for (int s = 0; s < 20; ++s) {
      for (float& x : g) x = dist(rng);
      const double lr = config.lr * (1.0 + 0.1 * s);
      opt->step(w, g, lr);
      ref.step(g, lr);
    }
    double max_err = 0.0;
    for (std::int64_t i = 0; i < n; ++i) max_err = std::max(max_err, std::abs(w[i] - ref.w[i]));
    CHECK(max_err < 1e-4);
    CHECK(opt->steps_taken() == 20);
  }
}

TEST_CASE("invalid hyper-parameters are ConfigErrors naming the value") {
  auto with = [](OptimizerConfig c, auto edit) {
    edit(c);
    return c;
  };
  const OptimizerConfig base_sgd = sgd(0.1, 0.9);
  const OptimizerConfig base_adam = adam(0.1);
  CHECK_THROWS_WITH_AS(make_optimizer(with(base_sgd, [](auto& c) { c.name = "rmsprop"; }), 4),
                       "optimizer: name: expected one of \"sgd\", \"adam\", got \"rmsprop\"", ConfigError);
  CHECK_THROWS_WITH_AS(make_optimizer(with(base_sgd, [](auto& c) { c.lr = 0; }), 4),
                       "optimizer sgd: lr: expected a finite number > 0, got 0", ConfigError);
  CHECK_THROWS_WITH_AS(make_optimizer(with(base_adam, [](auto& c) { c.lr = NAN; }), 4),
                       "optimizer adam: lr: expected a finite number > 0, got nan", ConfigError);
  CHECK_THROWS_WITH_AS(make_optimizer(with(base_sgd, [](auto& c) { c.weight_decay = -1; }), 4),
                       "optimizer sgd: weight_decay: expected a finite number >= 0, got -1", ConfigError);
  CHECK_THROWS_WITH_AS(make_optimizer(with(base_sgd, [](auto& c) { c.momentum = 1.0; }), 4),
                       "optimizer sgd: momentum: expected a number in [0, 1), got 1", ConfigError);
  CHECK_THROWS_WITH_AS(make_optimizer(with(base_sgd, [](auto& c) { c.momentum = -0.5; }), 4),
                       "optimizer sgd: momentum: expected a number in [0, 1), got -0.5", ConfigError);
  CHECK_THROWS_WITH_AS(make_optimizer(sgd(0.1, 0.0, 0.0, true), 4),
                       "optimizer sgd: momentum: expected > 0 with nesterov = true, got 0", ConfigError);
  CHECK_THROWS_WITH_AS(make_optimizer(with(base_adam, [](auto& c) { c.beta1 = 1.0; }), 4),
                       "optimizer adam: beta1: expected a number in [0, 1), got 1", ConfigError);
  CHECK_THROWS_WITH_AS(make_optimizer(with(base_adam, [](auto& c) { c.beta2 = -0.1; }), 4),
                       "optimizer adam: beta2: expected a number in [0, 1), got -0.1", ConfigError);
  CHECK_THROWS_WITH_AS(make_optimizer(with(base_adam, [](auto& c) { c.epsilon = 0; }), 4),
                       "optimizer adam: epsilon: expected a finite number > 0, got 0", ConfigError);
  CHECK_THROWS_WITH_AS(make_optimizer(base_adam, -1), "optimizer adam: num_elems: expected >= 0, got -1",
                       ConfigError);
  CHECK_NOTHROW(make_optimizer(with(base_sgd, [](auto& c) { c.beta1 = 7; }), 4));  // adam-only keys ignored
}

TEST_CASE("step checks lengths and lr") {
  auto opt = make_optimizer(sgd(0.1, 0.9), 3);
  std::vector<float> w(3), g(3), short_g(2);
  CHECK_THROWS_WITH_AS(opt->step(w, short_g, 0.1),
                       "optimizer step: expected 3 elements, got w of 3 and g of 2", ComputeError);
  CHECK_THROWS_WITH_AS(opt->step(w, g, -0.1), "optimizer step: lr: expected a finite number >= 0, got -0.1",
                       ConfigError);
  CHECK(opt->steps_taken() == 0);
  opt->step(w, g, 0.0);
  CHECK(opt->steps_taken() == 1);
}

}  // namespace
}  // namespace pstrain
