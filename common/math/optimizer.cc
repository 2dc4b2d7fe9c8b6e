// SGD and Adam over a flat float range: validation and state here, the
// arithmetic in common/math/update_rules.h (shared with the workers' backends).
#include "common/math/optimizer.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "common/base/errors.h"
#include "common/math/parallel_ranges.h"
#include "common/math/update_rules.h"

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

void check_stage_args(std::int64_t num_elems, std::span<const float> w, std::span<float> w_out,
                      std::size_t g_elems, double lr, bool in_place = false) {
  const auto n = static_cast<std::size_t>(num_elems);
  if (w.size() != n || w_out.size() != n || g_elems != n) {
    throw ComputeError("optimizer stage: expected " + std::to_string(num_elems) + " elements, got w of " +
                       std::to_string(w.size()) + ", w_out of " + std::to_string(w_out.size()) + " and g of " +
                       std::to_string(g_elems));
  }
  if (n > 0 && !in_place && w.data() == w_out.data()) {
    throw ComputeError("optimizer stage: w_out must be another buffer than w");
  }
  if (!(lr >= 0.0) || !std::isfinite(lr)) {
    throw ConfigError("optimizer stage: lr: expected a finite number >= 0, got " + num(lr));
  }
}

void check_state_size(const char* name, std::size_t given, std::size_t expected) {
  if (given != expected) {
    throw ConfigError(std::string("optimizer ") + name + ": saved state has " + std::to_string(given) +
                      " values, this optimizer keeps " + std::to_string(expected) +
                      " (was the checkpoint written with other optimizer settings?)");
  }
}

// An out-of-place update over ranges (the server's apply threads): each range
// reports whether its check found anything (RangeRunner sums counts); only then
// is the whole update run once more on this thread for the exact UpdateCheck
// (the first bad element, gradient or result), which rewrites the same outputs
// from the same inputs. Clean updates, the common case, cost one pass.
template <class Range>
update::UpdateCheck checked_over_ranges(RangeRunner* ranges, std::size_t n, const Range& range) {
  if (ranges == nullptr) return range(0, n);
  const std::int64_t findings = run_ranges(ranges, n, [&](std::size_t b, std::size_t e) -> std::int64_t {
    const update::UpdateCheck part = range(b, e);
    return part.bad_gradient + part.bad_result;
  });
  return findings == 0 ? update::UpdateCheck{} : range(0, n);
}

// The largest of body(begin, end) over the ranges (bounds as float bits).
template <class Body>
std::uint32_t max_over_ranges(RangeRunner* ranges, std::size_t n, const Body& body) {
  if (ranges == nullptr) return body(0, n);
  std::atomic<std::uint32_t> largest{0};
  run_ranges(ranges, n, [&](std::size_t b, std::size_t e) -> std::int64_t {
    const std::uint32_t part = body(b, e);
    std::uint32_t seen = largest.load(std::memory_order_relaxed);
    while (part > seen && !largest.compare_exchange_weak(seen, part, std::memory_order_relaxed)) {
    }
    return 0;
  });
  return largest.load(std::memory_order_relaxed);
}

double from_bits(std::uint32_t bits) { return static_cast<double>(std::bit_cast<float>(bits)); }

class Sgd final : public Optimizer {
 public:
  Sgd(const OptimizerConfig& config, std::int64_t num_elems)
      : config_(config),
        num_elems_(num_elems),
        velocity_(config.momentum > 0.0 ? static_cast<std::size_t>(num_elems) : 0, 0.0f) {}

  void step(std::span<float> w, std::span<const float> g, double lr) override {
    check_step_args(num_elems_, w, g, lr);
    const update::SgdCoefficients c =
        update::sgd_coefficients(lr, config_.momentum, config_.weight_decay, config_.nesterov);
    update::sgd_update(w.data(), g.data(), velocity_.empty() ? nullptr : velocity_.data(), w.size(), c);
    ++steps_taken_;
    velocity_bound_ = kUnknownBound;
  }

  update::UpdateCheck stage(std::span<const float> w, std::span<float> w_out, update::GradSource g,
                            std::size_t g_elems, double lr) override {
    check_stage_args(num_elems_, w, w_out, g_elems, lr);
    const update::SgdCoefficients c =
        update::sgd_coefficients(lr, config_.momentum, config_.weight_decay, config_.nesterov);
    staged_velocity_.resize(velocity_.size());
    staged_ = true;
    const float* vel = velocity_.empty() ? nullptr : velocity_.data();
    float* vel_out = staged_velocity_.empty() ? nullptr : staged_velocity_.data();
    const auto range = [&](std::size_t b, std::size_t e) {
      return update::sgd_update_into(w.data() + b, w_out.data() + b, update::offset(g, b),
                                     vel == nullptr ? nullptr : vel + b, vel_out == nullptr ? nullptr : vel_out + b,
                                     e - b, c);
    };
    return checked_over_ranges(ranges_, w.size(), range);
  }
  void commit() override {
    if (!staged_) throw ComputeError("optimizer commit: nothing staged");
    velocity_.swap(staged_velocity_);
    staged_ = false;
    ++steps_taken_;
    velocity_bound_ = kUnknownBound;
  }

  std::optional<double> update_in_place(std::span<float> w, double weight_bound, update::GradSource g,
                                        std::size_t g_elems, double lr) override {
    check_stage_args(num_elems_, w, w, g_elems, lr, true);
    const update::SgdCoefficients c =
        update::sgd_coefficients(lr, config_.momentum, config_.weight_decay, config_.nesterov);
    const std::size_t n = w.size();
    const std::uint32_t g_bits = max_over_ranges(ranges_, n, [&](std::size_t b, std::size_t e) {
      return update::gradient_bound_bits(update::offset(g, b), e - b);
    });
    if (g_bits >= update::kNonFiniteBits) return std::nullopt;  // stage() finds it and says what
    std::optional<update::SgdBounds> after;
    if (weight_bound >= 0.0 && velocity_bound_ >= 0.0) {
      after = update::sgd_bounds_after(c, weight_bound, velocity_bound_, from_bits(g_bits));
    }
    if (!after) {  // not known, or grown past what fits: the bounds as they are now
      weight_bound = from_bits(max_over_ranges(ranges_, n, [&](std::size_t b, std::size_t e) {
        return update::max_abs_bits(w.data() + b, e - b);
      }));
      velocity_bound_ = from_bits(max_over_ranges(ranges_, velocity_.size(), [&](std::size_t b, std::size_t e) {
        return update::max_abs_bits(velocity_.data() + b, e - b);
      }));
      after = update::sgd_bounds_after(c, weight_bound, velocity_bound_, from_bits(g_bits));
      if (!after) return std::nullopt;
    }
    float* vel = velocity_.empty() ? nullptr : velocity_.data();
    run_ranges(ranges_, n, [&](std::size_t b, std::size_t e) -> std::int64_t {
      update::sgd_update_in_place(w.data() + b, update::offset(g, b), vel == nullptr ? nullptr : vel + b, e - b, c,
                                  g_bits);
      return 0;
    });
    velocity_bound_ = after->velocity;
    staged_ = false;
    ++steps_taken_;
    return after->weights;
  }

  std::int64_t num_elems() const override { return num_elems_; }
  std::int64_t steps_taken() const override { return steps_taken_; }
  std::vector<float> state() const override { return velocity_; }
  void set_state(std::span<const float> state, std::int64_t steps_taken) override {
    check_state_size("sgd", state.size(), velocity_.size());
    velocity_.assign(state.begin(), state.end());
    steps_taken_ = steps_taken;
    staged_ = false;
    velocity_bound_ = kUnknownBound;
  }

 private:
  OptimizerConfig config_;
  std::int64_t num_elems_;
  std::int64_t steps_taken_ = 0;
  std::vector<float> velocity_;  // empty when momentum is 0
  std::vector<float> staged_velocity_;  // stage(): the next velocity, until commit()
  bool staged_ = false;
  double velocity_bound_ = 0.0;  // >= every |velocity_| (kUnknownBound: not known)
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
    const update::AdamCoefficients c = update::adam_coefficients(lr, config_.beta1, config_.beta2, config_.epsilon,
                                                                 config_.weight_decay, steps_taken_ + 1);
    update::adam_update(w.data(), g.data(), m_.data(), v_.data(), w.size(), c);
    ++steps_taken_;
  }

  update::UpdateCheck stage(std::span<const float> w, std::span<float> w_out, update::GradSource g,
                            std::size_t g_elems, double lr) override {
    check_stage_args(num_elems_, w, w_out, g_elems, lr);
    const update::AdamCoefficients c = update::adam_coefficients(lr, config_.beta1, config_.beta2, config_.epsilon,
                                                                 config_.weight_decay, steps_taken_ + 1);
    staged_m_.resize(m_.size());
    staged_v_.resize(v_.size());
    staged_ = true;
    const auto range = [&](std::size_t b, std::size_t e) {
      return update::adam_update_into(w.data() + b, w_out.data() + b, update::offset(g, b), m_.data() + b,
                                      staged_m_.data() + b, v_.data() + b, staged_v_.data() + b, e - b, c);
    };
    return checked_over_ranges(ranges_, w.size(), range);
  }
  void commit() override {
    if (!staged_) throw ComputeError("optimizer commit: nothing staged");
    m_.swap(staged_m_);
    v_.swap(staged_v_);
    staged_ = false;
    ++steps_taken_;
  }

  std::int64_t num_elems() const override { return num_elems_; }
  std::int64_t steps_taken() const override { return steps_taken_; }
  std::vector<float> state() const override {
    std::vector<float> s(m_);
    s.insert(s.end(), v_.begin(), v_.end());
    return s;
  }
  void set_state(std::span<const float> state, std::int64_t steps_taken) override {
    check_state_size("adam", state.size(), m_.size() + v_.size());
    std::copy(state.begin(), state.begin() + static_cast<std::ptrdiff_t>(m_.size()), m_.begin());
    std::copy(state.begin() + static_cast<std::ptrdiff_t>(m_.size()), state.end(), v_.begin());
    steps_taken_ = steps_taken;
    staged_ = false;
  }

 private:
  OptimizerConfig config_;
  std::int64_t num_elems_;
  std::int64_t steps_taken_ = 0;
  std::vector<float> m_;  // first moment
  std::vector<float> v_;  // second moment
  std::vector<float> staged_m_, staged_v_;  // stage(): the next moments, until commit()
  bool staged_ = false;
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

OptimizerConfig server_optimizer(const RunConfig& config, double* implicit) {
  OptimizerConfig o = config.optimizer;
  const bool asynchronous = config.mode == Mode::kAsync || config.mode == Mode::kSsp;
  const double extra = asynchronous ? 1.0 - 1.0 / static_cast<double>(config.cluster.num_workers) : 0.0;
  if (implicit != nullptr) *implicit = extra;
  if (asynchronous && o.momentum_correction && o.name == "sgd") {
    o.momentum = std::max(0.0, o.momentum - extra);
    if (o.momentum == 0.0) o.nesterov = false;
  }
  return o;
}

std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& config, std::int64_t num_elems) {
  validate(config, num_elems);
  if (config.name == "adam") return std::make_unique<Adam>(config, num_elems);
  return std::make_unique<Sgd>(config, num_elems);
}

}  // namespace pstrain
