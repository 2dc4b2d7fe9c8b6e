// Learning-rate schedule; the formulas are in lr_schedule.h.
#include "common/math/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <sstream>
#include <string>

#include "common/base/errors.h"

namespace pstrain {
namespace {

std::string num(double x) {
  std::ostringstream os;
  os.precision(15);
  os << x;
  return os.str();
}

[[noreturn]] void fail(const std::string& what, const std::string& expected, const std::string& got) {
  throw ConfigError("lr schedule: " + what + ": expected " + expected + ", got " + got);
}

void check_count(const char* what, std::int64_t value) {
  if (value < 1) fail(what, "an integer >= 1", std::to_string(value));
}

void validate(const OptimizerConfig& optimizer, const ScheduleConfig& schedule) {
  if (!(optimizer.lr > 0.0) || !std::isfinite(optimizer.lr)) {
    fail("optimizer.lr", "a finite number > 0", num(optimizer.lr));
  }
  const std::string& decay = schedule.decay;
  if (decay != "none" && decay != "step" && decay != "cosine") {
    fail("schedule.decay", "one of \"none\", \"step\", \"cosine\"", "\"" + decay + "\"");
  }
  if (!(schedule.warmup_epochs >= 0.0) || !std::isfinite(schedule.warmup_epochs)) {
    fail("schedule.warmup_epochs", "a finite number >= 0", num(schedule.warmup_epochs));
  }
  double previous = 0.0;
  for (const double epoch : schedule.step_epochs) {
    if (!(epoch > previous) || !std::isfinite(epoch)) {
      fail("schedule.step_epochs", "finite numbers > 0 in increasing order",
           num(epoch) + " after " + num(previous));
    }
    previous = epoch;
  }
  if (!(schedule.gamma > 0.0 && schedule.gamma <= 1.0)) {
    fail("schedule.gamma", "a number in (0, 1]", num(schedule.gamma));
  }
  if (!(schedule.min_lr >= 0.0) || !std::isfinite(schedule.min_lr)) {
    fail("schedule.min_lr", "a finite number >= 0", num(schedule.min_lr));
  }
  check_count("schedule.base_batch", schedule.base_batch);
}

std::int64_t epochs_to_steps(double epochs, std::int64_t steps_per_epoch) {
  return std::llround(epochs * static_cast<double>(steps_per_epoch));
}

}  // namespace

std::int64_t samples_per_update(Mode mode, int batch_size, int num_workers) {
  const auto batch = static_cast<std::int64_t>(batch_size);
  switch (mode) {
    case Mode::kAsync:
    case Mode::kSsp:
      return batch;
    case Mode::kSync:
    case Mode::kAllreduce:
      break;
  }
  return batch * num_workers;
}

double schedule_max_lr(const OptimizerConfig& optimizer, const ScheduleConfig& schedule, std::int64_t global_batch) {
  validate(optimizer, schedule);
  check_count("global_batch", global_batch);
  double base = optimizer.lr;
  if (schedule.linear_scaling) base *= static_cast<double>(global_batch) / static_cast<double>(schedule.base_batch);
  return base;
}

LrSchedule::LrSchedule(const OptimizerConfig& optimizer, const ScheduleConfig& schedule,
                       std::int64_t steps_per_epoch, std::int64_t total_steps, std::int64_t global_batch)
    : schedule_(schedule), total_steps_(total_steps), steps_per_epoch_(steps_per_epoch) {
  validate(optimizer, schedule);
  check_count("steps_per_epoch", steps_per_epoch);
  check_count("total_steps", total_steps);
  base_lr_ = schedule_max_lr(optimizer, schedule, global_batch);
  if (schedule.min_lr > base_lr_) {
    fail("schedule.min_lr", "at most the base lr (" + num(base_lr_) + ")", num(schedule.min_lr));
  }
  warmup_steps_ = epochs_to_steps(schedule.warmup_epochs, steps_per_epoch);
  for (const double epoch : schedule.step_epochs) {
    decay_steps_.push_back(epochs_to_steps(epoch, steps_per_epoch));
  }
}

double LrSchedule::lr_at(std::int64_t step) const {
  if (step < 0) fail("step", "an integer >= 0", std::to_string(step));
  const double lr = decayed_lr(step);
  if (step >= warmup_steps_) return lr;
  return lr * static_cast<double>(step + 1) / static_cast<double>(warmup_steps_);
}

double LrSchedule::lr_in_epoch(int epoch, std::int64_t batch, std::int64_t steps_this_epoch) const {
  if (epoch < 0) fail("epoch", "an integer >= 0", std::to_string(epoch));
  if (batch < 0) fail("batch", "an integer >= 0", std::to_string(batch));
  check_count("steps_this_epoch", steps_this_epoch);
  if (steps_this_epoch == steps_per_epoch_) return lr_at(epoch * steps_per_epoch_ + batch);  // the first plan
  const double per_epoch = static_cast<double>(steps_per_epoch_);
  return lr_at_fraction(epoch * per_epoch + static_cast<double>(batch) * per_epoch / static_cast<double>(steps_this_epoch));
}

double LrSchedule::lr_at_fraction(double step) const {
  const auto warmup = static_cast<double>(warmup_steps_);
  const auto total = static_cast<double>(total_steps_);
  double lr = base_lr_;
  if (schedule_.decay == "step") {
    for (const std::int64_t boundary : decay_steps_) {
      if (step >= static_cast<double>(boundary)) lr *= schedule_.gamma;
    }
  } else if (schedule_.decay == "cosine" && step > warmup) {
    if (step >= total) return schedule_.min_lr;
    const double progress = (step - warmup) / (total - warmup);
    lr = schedule_.min_lr + (base_lr_ - schedule_.min_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
  }
  if (step >= warmup) return lr;
  return lr * std::min(1.0, (step + 1.0) / warmup);
}

double LrSchedule::decayed_lr(std::int64_t step) const {
  if (schedule_.decay == "step") {
    double lr = base_lr_;
    for (const std::int64_t boundary : decay_steps_) {
      if (step >= boundary) lr *= schedule_.gamma;
    }
    return lr;
  }
  if (schedule_.decay == "cosine" && step > warmup_steps_) {
    if (step >= total_steps_) return schedule_.min_lr;
    const double progress =
        static_cast<double>(step - warmup_steps_) / static_cast<double>(total_steps_ - warmup_steps_);
    const double min_lr = schedule_.min_lr;
    return min_lr + (base_lr_ - min_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
  }
  return base_lr_;
}

}  // namespace pstrain
