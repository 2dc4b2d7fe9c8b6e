// Learning rate per optimizer step: linear warmup, then a decay.
//
//   base   = optimizer.lr * (linear_scaling ? global_batch / base_batch : 1)
//   W      = round(warmup_epochs * steps_per_epoch) warmup steps
//   warmup = step < W ? (step + 1) / W : 1          (Goyal et al. 2017)
//   lr_at(step) = base * warmup * decay(step), where decay(step) is
//     "none":   1
//     "step":   gamma^k, k = number of boundaries b in step_epochs with
//               step >= round(b * steps_per_epoch)
//     "cosine": 1 before step W; from W to total_steps it goes from 1 down to
//               min_lr / base along (1 + cos(pi * p)) / 2, p = (step - W) /
//               (total_steps - W); min_lr / base past total_steps.
// Steps count from 0.
//
// The schedule is defined on the job's first plan (steps_per_epoch with every
// worker). When the plan changes (a worker dropped: the survivors cover the
// whole training set, so an epoch has more steps), lr_in_epoch() evaluates it
// at the same fraction of training: batch b of E steps in epoch e is the
// first plan's (fractional) step s = e * steps_per_epoch + b *
// steps_per_epoch / E, and the formulas above are taken at s (warmup capped
// at 1). So warmup ends, step decays happen and a cosine reaches min_lr at
// the same epochs as without the change. With E = steps_per_epoch it is
// exactly lr_at(e * steps_per_epoch + b). Immutable after construction, so
// thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "common/config/config.h"

namespace pstrain {

// The samples one optimizer update is made of, the batch linear scaling
// scales by: batch_size x workers in sync and allreduce (one update from every
// worker's gradient), batch_size in async and ssp (every push is an update of
// its own; scaling by the workers would apply W times the rate W times).
std::int64_t samples_per_update(Mode mode, int batch_size, int num_workers);
inline std::int64_t samples_per_update(const RunConfig& config) {
  return samples_per_update(config.mode, config.workload.batch_size, config.cluster.num_workers);
}

// The highest learning rate the schedule gives at any step, under any plan:
// its base, optimizer.lr times (with linear_scaling) global_batch /
// base_batch, since warmup, step decay and cosine only multiply the base by
// factors <= 1 (cosine ends at min_lr <= base). The servers bound a push's
// rate by it (ServerOptions::max_lr). ConfigError for invalid settings,
// as the constructor below.
double schedule_max_lr(const OptimizerConfig& optimizer, const ScheduleConfig& schedule, std::int64_t global_batch);
// An elastic job's largest global batch is that of cluster.max_workers
// (EpochDriver scales the rate by the members in sync and allreduce).
inline double schedule_max_lr(const RunConfig& config) {
  return schedule_max_lr(config.optimizer, config.schedule,
                         samples_per_update(config.mode, config.workload.batch_size, max_workers(config.cluster)));
}

class LrSchedule {
 public:
  // Throws ConfigError for invalid hyper-parameters or counts (each >= 1).
  // `global_batch`: the samples per update (samples_per_update).
  LrSchedule(const OptimizerConfig& optimizer, const ScheduleConfig& schedule, std::int64_t steps_per_epoch,
             std::int64_t total_steps, std::int64_t global_batch);

  // Learning rate for 0-based step `step` (>= 0, else ConfigError).
  double lr_at(std::int64_t step) const;
  // Learning rate for 0-based batch `batch` of epoch `epoch`, which has
  // `steps_this_epoch` steps under the current plan (above). ConfigError for
  // a negative epoch or batch or steps_this_epoch < 1.
  double lr_in_epoch(int epoch, std::int64_t batch, std::int64_t steps_this_epoch) const;

  double base_lr() const { return base_lr_; }
  std::int64_t steps_per_epoch() const { return steps_per_epoch_; }
  std::int64_t warmup_steps() const { return warmup_steps_; }
  // Steps at which "step" decay multiplies by gamma, increasing.
  const std::vector<std::int64_t>& decay_steps() const { return decay_steps_; }

 private:
  double decayed_lr(std::int64_t step) const;  // base * decay(step)
  double lr_at_fraction(double step) const;      // the formulas at a fractional first-plan step

  ScheduleConfig schedule_;
  double base_lr_ = 0.0;
  std::int64_t total_steps_ = 0;
  std::int64_t steps_per_epoch_ = 0;
  std::int64_t warmup_steps_ = 0;
  std::vector<std::int64_t> decay_steps_;
};

}  // namespace pstrain
