#include "worker/nn/device_optimizer.h"

#include <cmath>
#include <string>

#include "common/base/errors.h"
#include "common/math/optimizer.h"

namespace pstrain::nn {
namespace {

DeviceBuffer zeroed(Backend& backend, std::int64_t num_elems) {
  DeviceBuffer buf(backend, static_cast<std::size_t>(num_elems) * sizeof(float));
  backend.fill(buf.f32(), 0.0f, static_cast<std::size_t>(num_elems));
  return buf;
}

}  // namespace

DeviceOptimizer::DeviceOptimizer(const OptimizerConfig& config, Backend& backend, std::int64_t num_elems)
    : config_(config), backend_(backend), num_elems_(num_elems) {
  make_optimizer(config, 0);  // the shared validation; no state for 0 elements
  if (num_elems < 0) {
    throw ConfigError("device optimizer: num_elems: expected >= 0, got " + std::to_string(num_elems));
  }
  if (config.name == "adam") {
    state1_ = zeroed(backend, num_elems);
    state2_ = zeroed(backend, num_elems);
  } else if (config.momentum > 0.0) {
    state1_ = zeroed(backend, num_elems);
  }
}

void DeviceOptimizer::step(float* w, const float* g, double lr) {
  if (!(lr >= 0.0) || !std::isfinite(lr)) {
    throw ConfigError("device optimizer step: lr: expected a finite number >= 0, got " + std::to_string(lr));
  }
  const auto n = static_cast<std::size_t>(num_elems_);
  ++steps_taken_;
  if (config_.name == "adam") {
    const update::AdamCoefficients c = update::adam_coefficients(lr, config_.beta1, config_.beta2, config_.epsilon,
                                                                 config_.weight_decay, steps_taken_);
    backend_.adam_step(w, g, state1_.f32(), state2_.f32(), n, c);
  } else {
    const update::SgdCoefficients c =
        update::sgd_coefficients(lr, config_.momentum, config_.weight_decay, config_.nesterov);
    backend_.sgd_step(w, g, state1_.f32(), n, c);  // null velocity when momentum is 0
  }
}

std::vector<float> DeviceOptimizer::state() const {
  const std::size_t n1 = state1_.num_elems<float>(), n2 = state2_.num_elems<float>();
  std::vector<float> out(n1 + n2);
  if (n1 > 0) state1_.download(std::span<float>(out).first(n1));
  if (n2 > 0) state2_.download(std::span<float>(out).subspan(n1));
  return out;
}

void DeviceOptimizer::set_state(std::span<const float> state, std::int64_t steps_taken) {
  const std::size_t n1 = state1_.num_elems<float>(), n2 = state2_.num_elems<float>();
  if (state.size() != n1 + n2) {
    throw ConfigError("optimizer " + config_.name + ": saved state has " + std::to_string(state.size()) +
                      " values, this optimizer keeps " + std::to_string(n1 + n2) +
                      " (was the checkpoint written with other optimizer settings?)");
  }
  if (n1 > 0) state1_.upload(state.first(n1));
  if (n2 > 0) state2_.upload(state.subspan(n1));
  steps_taken_ = steps_taken;
}

}  // namespace pstrain::nn
