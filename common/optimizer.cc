// SGD and Adam over a flat float range; formulas in optimizer.h. State is
// float, hyper-parameters are rounded to float once per step, and each inner
// loop is a plain indexed loop the compiler can vectorize.
#include "common/optimizer.h"

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "common/errors.h"

namespace pstrain {
namespace {

std::string num(double x) {
  std::ostringstream os;
  os.precision(15);
  os << x;
  return os.str();
}

[[noreturn]] void bad_hyper(const std::string& name, const std::string& key, const std::string& expected,
                            double got) {
  throw ConfigError("optimizer " + name + ": " + key + ": expected " + expected + ", got " + num(got));
}

void check_in(const std::string& name, const std::string& key, double x, double lo, double hi) {
  if (!(x >= lo && x < hi)) {
    bad_hyper(name, key, "a number in [" + num(lo) + ", " + num(hi) + ")", x);
  }
}

void check_step_args(std::int64_t num_elems, std::span<float> w, std::span<const float> g, double lr) {
  if (static_cast<std::int64_t>(w.size()) != num_elems || static_cast<std::int64_t>(g.size()) != num_elems) {
    throw ComputeError("optimizer step: expected " + std::to_string(num_elems) + " elements, got w of " +
                       std::to_string(w.size()) + " and g of " + std::to_string(g.size()));
  }
  if (!(lr >= 0.0) || !std::isfinite(lr)) {
    throw ConfigError("optimizer step: lr: expected a finite number >= 0, got " + num(lr));
  }
}

class Sgd final : public Optimizer {
 public:
  Sgd(const OptimizerConfig& config, std::int64_t num_elems)
      : config_(config),
        num_elems_(num_elems),
        velocity_(config.momentum > 0.0 ? static_cast<std::size_t>(num_elems) : 0, 0.0f) {}

  void step(std::span<float> w, std::span<const float> g, double lr) override {
    check_step_args(num_elems_, w, g, lr);
    const auto lr_f = static_cast<float>(lr);
    const auto wd = static_cast<float>(config_.weight_decay);
    const auto mu = static_cast<float>(config_.momentum);
    const std::size_t n = w.size();
    float* wp = w.data();
    const float* gp = g.data();
    float* vp = velocity_.data();
    if (velocity_.empty()) {
      for (std::size_t i = 0; i < n; ++i) wp[i] -= lr_f * (gp[i] + wd * wp[i]);
    } else if (config_.nesterov) {
      for (std::size_t i = 0; i < n; ++i) {
        const float gi = gp[i] + wd * wp[i];
        const float vi = mu * vp[i] + gi;
        vp[i] = vi;
        wp[i] -= lr_f * (gi + mu * vi);
      }
    } else {
      for (std::size_t i = 0; i < n; ++i) {
        const float vi = mu * vp[i] + (gp[i] + wd * wp[i]);
        vp[i] = vi;
        wp[i] -= lr_f * vi;
      }
    }
    ++steps_taken_;
  }

  std::int64_t num_elems() const override { return num_elems_; }
  std::int64_t steps_taken() const override { return steps_taken_; }

 private:
  OptimizerConfig config_;
  std::int64_t num_elems_;
  std::int64_t steps_taken_ = 0;
  std::vector<float> velocity_;  // empty when momentum is 0
};

class Adam final : public Optimizer {
 public:
  Adam(const OptimizerConfig& config, std::int64_t num_elems)
      : config_(config),
        num_elems_(num_elems),
        m_(static_cast<std::size_t>(num_elems), 0.0f),
        v_(static_cast<std::size_t>(num_elems), 0.0f) {}

  void step(std::span<float> w, std::span<const float> g, double lr) override {
    check_step_args(num_elems_, w, g, lr);
    const double t = static_cast<double>(steps_taken_ + 1);
    const double correction1 = 1.0 - std::pow(config_.beta1, t);
    const double correction2 = 1.0 - std::pow(config_.beta2, t);
    // w -= lr * (m / c1) / (sqrt(v / c2) + eps), with the divisions hoisted.
    const auto step_size = static_cast<float>(lr / correction1);
    const auto inv_sqrt_c2 = static_cast<float>(1.0 / std::sqrt(correction2));
    const auto b1 = static_cast<float>(config_.beta1);
    const auto b2 = static_cast<float>(config_.beta2);
    const auto one_minus_b1 = static_cast<float>(1.0 - config_.beta1);
    const auto one_minus_b2 = static_cast<float>(1.0 - config_.beta2);
    const auto eps = static_cast<float>(config_.epsilon);
    const auto wd = static_cast<float>(config_.weight_decay);
    const std::size_t n = w.size();
    float* wp = w.data();
    const float* gp = g.data();
    float* mp = m_.data();
    float* vp = v_.data();
    for (std::size_t i = 0; i < n; ++i) {
      const float gi = gp[i] + wd * wp[i];
      const float mi = b1 * mp[i] + one_minus_b1 * gi;
      const float vi = b2 * vp[i] + one_minus_b2 * gi * gi;
      mp[i] = mi;
      vp[i] = vi;
      wp[i] -= step_size * mi / (std::sqrt(vi) * inv_sqrt_c2 + eps);
    }
    ++steps_taken_;
  }

  std::int64_t num_elems() const override { return num_elems_; }
  std::int64_t steps_taken() const override { return steps_taken_; }

 private:
  OptimizerConfig config_;
  std::int64_t num_elems_;
  std::int64_t steps_taken_ = 0;
  std::vector<float> m_;  // first moment
  std::vector<float> v_;  // second moment
};

void validate(const OptimizerConfig& c, std::int64_t num_elems) {
  const std::string& name = c.name;
  if (name != "sgd" && name != "adam") {
    throw ConfigError("optimizer: name: expected one of \"sgd\", \"adam\", got \"" + name + "\"");
  }
  if (num_elems < 0) {
    throw ConfigError("optimizer " + name + ": num_elems: expected >= 0, got " + std::to_string(num_elems));
  }
  if (!(c.lr > 0.0) || !std::isfinite(c.lr)) bad_hyper(name, "lr", "a finite number > 0", c.lr);
  if (!(c.weight_decay >= 0.0) || !std::isfinite(c.weight_decay)) {
    bad_hyper(name, "weight_decay", "a finite number >= 0", c.weight_decay);
  }
  if (name == "sgd") {
    check_in(name, "momentum", c.momentum, 0.0, 1.0);
    if (c.nesterov && c.momentum == 0.0) bad_hyper(name, "momentum", "> 0 with nesterov = true", c.momentum);
    return;
  }
  check_in(name, "beta1", c.beta1, 0.0, 1.0);
  check_in(name, "beta2", c.beta2, 0.0, 1.0);
  if (!(c.epsilon > 0.0) || !std::isfinite(c.epsilon))
    bad_hyper(name, "epsilon", "a finite number > 0", c.epsilon);
}

}  // namespace

std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& config, std::int64_t num_elems) {
  validate(config, num_elems);
  if (config.name == "adam") return std::make_unique<Adam>(config, num_elems);
  return std::make_unique<Sgd>(config, num_elems);
}

}  // namespace pstrain
