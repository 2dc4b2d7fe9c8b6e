// An optimizer applied on the backend ("device-side") to a model's flat
// parameter buffer with its flat gradient buffer, using Backend::sgd_step /
// adam_step: the same formulas as common/math/optimizer.h, without copying
// parameters to the host. Owns the optimizer state (SGD velocity when
// momentum > 0; Adam's m and v) in backend memory, zero-initialized.
// Used by the single-worker trainer and usable by allreduce workers.
// Not thread-safe; the backend must outlive it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/config/config.h"
#include "worker/nn/backend.h"
#include "worker/nn/device_buffer.h"

namespace pstrain::nn {

class DeviceOptimizer {
 public:
  // Validates `config` exactly like make_optimizer (ConfigError for an
  // unknown name or invalid hyper-parameters).
  DeviceOptimizer(const OptimizerConfig& config, Backend& backend, std::int64_t num_elems);

  // One update of w [num_elems] with g [num_elems], both backend memory.
  // Throws ConfigError for a negative or non-finite lr.
  void step(float* w, const float* g, double lr);
  std::int64_t steps_taken() const { return steps_taken_; }
  std::int64_t num_elems() const { return num_elems_; }
  // The state for a checkpoint, copied to the host (sgd: the velocity, empty
  // without momentum; adam: m then v), and its restore (ConfigError when the
  // size differs from what state() gives).
  std::vector<float> state() const;
  void set_state(std::span<const float> state, std::int64_t steps_taken);

 private:
  OptimizerConfig config_;
  Backend& backend_;
  std::int64_t num_elems_;
  std::int64_t steps_taken_ = 0;
  DeviceBuffer state1_;  // sgd: velocity (empty when momentum is 0); adam: m
  DeviceBuffer state2_;  // adam: v
};

}  // namespace pstrain::nn
