#include "worker/train/epoch_driver.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "common/base/errors.h"
#include "worker/train/records.h"

namespace pstrain {

std::int64_t steps_per_epoch(std::int64_t shard_samples, int batch_size) {
  return (shard_samples + batch_size - 1) / batch_size;
}

namespace {
// What the progress lines report on: the steps since the previous line.
struct ProgressWindow {
  std::int64_t images;  // trained by this worker when the window began
  double time_s;
  double loss_sum;
  int losses;
};

std::int64_t capped_total(std::int64_t per_epoch, const WorkloadConfig& w) {
  const std::int64_t total = per_epoch * w.epochs;
  return w.max_steps > 0 ? std::min(total, w.max_steps) : total;
}
}  // namespace

EpochDriver::EpochDriver(const RunConfig& config, const data::Dataset& train, int rank, int num_workers)
    : batch_size_(config.workload.batch_size), epochs_(config.workload.epochs), rank_(rank), num_workers_(num_workers),
      scale_lr_by_members_(is_elastic(config.cluster) && config.schedule.linear_scaling &&
                           samples_per_update(config.mode, 1, 2) == 2),
      num_samples_(train.num_samples), seed_(config.workload.seed), max_steps_(config.workload.max_steps),
      // The first plan's shard size (a joiner's rank may lie past the initial workers: any rank gives it).
      sampler_(train.num_samples, num_workers, rank % std::max(num_workers, 1), config.workload.seed),
      per_epoch_(pstrain::steps_per_epoch(sampler_.num_samples_per_replica(), batch_size_)),
      total_(capped_total(per_epoch_, config.workload)),
      schedule_(config.optimizer, config.schedule, per_epoch_, std::max<std::int64_t>(total_, 1),
                samples_per_update(config.mode, batch_size_, num_workers)) {
  // A larger batch would silently shrink to the shard: one short step an epoch.
  const std::int64_t shard = sampler_.num_samples_per_replica();
  if (batch_size_ > shard) {
    throw ConfigError("workload.batch_size " + std::to_string(batch_size_) + " is larger than a worker's shard: " +
                      std::to_string(train.num_samples) + " training samples / " + std::to_string(num_workers) +
                      " workers = " + std::to_string(shard) + " per worker; use workload.batch_size <= " +
                      std::to_string(shard) + " or fewer workers");
  }
}

int EpochDriver::epoch_after(std::int64_t steps_done) const {
  if (steps_done <= 0) return 0;
  if (epoch_starts_.empty()) return static_cast<int>((steps_done - 1) / per_epoch_);
  int epoch = 0;
  for (std::size_t e = 0; e < epoch_starts_.size(); ++e) {
    if (epoch_starts_[e] < steps_done) epoch = static_cast<int>(e);
  }
  return epoch;
}

double EpochDriver::lr_factor(int members) const {
  return scale_lr_by_members_ ? static_cast<double>(members) / static_cast<double>(num_workers_) : 1.0;
}

EpochSplit EpochDriver::split_of(EpochMembers& who, int epoch) const {
  return EpochSplit(num_samples_, batch_size_, seed_, epoch, who.segments(epoch), rank_);
}

std::int64_t EpochDriver::planned_total(std::int64_t start, int epoch, const EpochSplit& split,
                                        const std::vector<EpochSegment>& segments) const {
  // This epoch's steps, then whole epochs with the last segment's members.
  const auto later = static_cast<int>(segments.back().members.size());
  const std::int64_t full = pstrain::steps_per_epoch((num_samples_ + later - 1) / later, batch_size_);
  const std::int64_t total = start + split.steps() + full * (epochs_ - epoch - 1);
  return max_steps_ > 0 ? std::min(total, max_steps_) : total;
}

struct EpochDriver::Walk {
  Logger& log;
  MetricsWriter& metrics;
  const std::int64_t& images;
  const StepFn& step_fn;
  EpochMembers& who;
  int epoch = 0;
  std::int64_t start = 0;      // the epoch's first step
  std::int64_t step = 0;       // the next step to run
  std::int64_t total = 0;      // the plan's steps in all
  std::int64_t announced = 0;  // steps per epoch of the last "plan" record
  ProgressWindow window;
  EpochCoverage coverage{};    // this epoch's samples trained by this process
  std::int64_t epoch_first = 0;  // the first step this process ran in the epoch
  int announced_workers = -1;  // the workers sharing the epoch in the last "plan" record (-1: not said)
};

namespace {
// The "coverage" record of what this process trained of the epoch up to step `end` (exclusive; none
// when it ran no step of it).
void write_coverage(EpochDriver::Walk& w, std::int64_t end) {
  if (w.coverage.samples == 0) return;
  w.metrics.write(JsonLine().add("type", "coverage").add("time_s", w.metrics.elapsed_s()).add("epoch", w.epoch)
                      .add("first_step", w.epoch_first).add("steps", end - w.epoch_first)
                      .add("samples", w.coverage.samples).add("checksum", checksum_text(w.coverage.checksum)));
  w.coverage = EpochCoverage{};
}
}  // namespace

void EpochDriver::replan(Walk& w, const EpochSplit& split, std::int64_t at, bool changed) const {
  const std::vector<EpochSegment>& segments = w.who.segments(w.epoch);
  w.total = planned_total(w.start, w.epoch, split, segments);
  const std::int64_t b = std::min(at - w.start, split.steps() - 1);
  const std::size_t k = split.segment_at(std::max<std::int64_t>(b, 0));
  const int workers = split.shard_at(std::max<std::int64_t>(b, 0)).replicas;
  // Written when the steps or the workers differ from the last record's: a drop can leave an
  // epoch as many steps as the one before (a grow in its middle), and the summary reads the
  // membership changes from these records.
  if (split.steps() == w.announced && workers == w.announced_workers && !changed) return;
  JsonLine plan;
  plan.add("type", "plan").add("time_s", w.metrics.elapsed_s()).add("total_steps", w.total)
      .add("steps_per_epoch", split.steps()).add("epochs", epochs_).add("epoch", w.epoch)
      .add("workers", workers);
  if (k > 0) plan.add("step", w.start + segments[k].from_step);
  if (k > 0 && !segments[k].reason.empty()) plan.add("reason", segments[k].reason);
  w.metrics.write(plan);
  const std::string from = k > 0 ? " from its step " + std::to_string(segments[k].from_step) : "";
  w.log.info("epoch " + std::to_string(w.epoch) + from + ": " + std::to_string(segments[k].members.size()) +
             " workers (" + format_members(segments[k].members) + ") share the training set: " +
             std::to_string(split.steps()) + (k > 0 ? " steps in this epoch, " : " steps per epoch, ") +
             std::to_string(w.total) + " in all");
  w.announced = split.steps();
  w.announced_workers = workers;
}

bool EpochDriver::run_epoch(Walk& w) const {
  EpochSplit split = split_of(w.who, w.epoch);
  std::size_t known = w.who.segments(w.epoch).size();
  replan(w, split, w.step, false);
  // A change announced before this worker reached the epoch (it was behind,
  // async/ssp): its record as well, with the step it takes effect at.
  for (std::size_t k = split.segment_at(std::min(w.step - w.start, split.steps() - 1)) + 1; k < known; ++k) {
    replan(w, split, w.start + w.who.segments(w.epoch)[k].from_step, true);
  }
  if (!split.shard_at(w.step - w.start).member && split.segment_at(w.step - w.start) == 0) {
    w.log.warn("epoch " + std::to_string(w.epoch) + " was begun by workers " + format_members(w.who.of(w.epoch)) +
               " before this worker was back: it repeats the shard of position " +
               std::to_string(split.shard_at(w.step - w.start).position) + " until the epoch ends");
  }
  w.epoch_first = w.step;
  for (std::int64_t b = w.step - w.start; b < split.steps() && w.step < w.total; ++b, ++w.step) {
    const std::size_t k = split.segment_at(b);
    const EpochShard& shard = split.shard_at(b);
    if (k > 0 && !shard.member) {
      w.log.info("retired at step " + std::to_string(w.step) + " (epoch " + std::to_string(w.epoch) +
                 "): not among the workers " + format_members(w.who.segments(w.epoch)[k].members) + " from there");
      write_coverage(w, w.step);
      return false;
    }
    double lr = schedule_.lr_in_epoch(w.epoch, b, split.steps());
    if (scale_lr_by_members_) lr *= lr_factor(shard.replicas);
    const auto batch = split.batch(b);
    const bool last_of_epoch = b + 1 >= split.steps();
    this_ = NextStep{w.epoch, b, false, w.step};
    next_ = NextStep{last_of_epoch ? w.epoch + 1 : w.epoch, last_of_epoch ? 0 : b + 1,
                     w.step + 1 >= w.total || (last_of_epoch && w.epoch + 1 >= epochs_), w.step + 1};
    const bool next_last_of_epoch = !last_of_epoch && b + 2 >= split.steps();
    after_next_ = NextStep{last_of_epoch || next_last_of_epoch ? w.epoch + 1 : w.epoch,
                           last_of_epoch ? 1 : (next_last_of_epoch ? 0 : b + 2),
                           next_.end || w.step + 2 >= w.total || (next_last_of_epoch && w.epoch + 1 >= epochs_),
                           w.step + 2};
    w.coverage.add(batch);
    // The epoch's record before its last step: a checkpoint after that step (taken in the step
    // function) then keeps it in the metrics file it cuts back to, and a resume from it, which
    // starts at the next epoch, does not lose the epoch's coverage.
    if (last_of_epoch) write_coverage(w, w.step + 1);
    const double loss = w.step_fn(batch, w.step, w.epoch, lr);
    if (std::isfinite(loss)) w.window.loss_sum += loss, ++w.window.losses;
    const std::int64_t progress_every = std::max<std::int64_t>(split.steps() / 5, 1);
    if (rank_ == 0 && (b + 1) % progress_every == 0) {
      const double now = w.metrics.elapsed_s();
      log_progress(w.log, w.epoch, b, split.steps(), w.step,
                   w.window.losses > 0 ? w.window.loss_sum / w.window.losses : std::nan(""),
                   static_cast<double>(w.images - w.window.images) / (now - w.window.time_s), now - w.window.time_s);
      w.window = ProgressWindow{w.images, now, 0.0, 0};
    }
    if (w.who.segments(w.epoch).size() != known) {  // a change was announced during the step
      const std::int64_t from = w.who.segments(w.epoch).back().from_step;
      if (from <= b) {
        throw ProtocolError("membership change from step " + std::to_string(from) + " of epoch " +
                            std::to_string(w.epoch) + " heard after this worker ran its step " + std::to_string(b) +
                            " (a change must be announced ahead of every worker's progress)");
      }
      split = split_of(w.who, w.epoch);
      known = w.who.segments(w.epoch).size();
      replan(w, split, w.start + from, true);
    }
  }
  write_coverage(w, w.step);
  return true;
}

std::int64_t EpochDriver::run(Logger& log, MetricsWriter& metrics, const std::int64_t& images, const StepFn& step_fn,
                              const EpochEndFn& epoch_end, std::int64_t first_step, EpochMembers* members) {
  EpochMembers everyone(EpochMembers::all_of(num_workers_));
  EpochMembers& who = members != nullptr ? *members : everyone;
  retired_ = false;
  // Where first_step lies: the epochs before it, with the workers each had.
  const std::int64_t first = std::max<std::int64_t>(first_step, 0);
  epoch_starts_.clear();
  std::int64_t start = 0;
  int epoch = 0;
  std::int64_t total = 0;
  std::int64_t per_epoch = per_epoch_;
  for (; epoch < epochs_; ++epoch) {
    epoch_starts_.push_back(start);
    const EpochSplit split = split_of(who, epoch);
    per_epoch = split.steps();
    total = planned_total(start, epoch, split, who.segments(epoch));
    if (first < start + per_epoch) break;
    start += per_epoch;
  }
  if (epoch == epochs_) total = max_steps_ > 0 ? std::min(start, max_steps_) : start;
  Walk w{log, metrics, images, step_fn, who, epoch, start, first, total, per_epoch_,
         ProgressWindow{images, metrics.elapsed_s(), 0.0, 0}};
  if (first_step <= 0) {
    metrics.write(JsonLine().add("type", "plan").add("time_s", metrics.elapsed_s()).add("total_steps", total)
                      .add("steps_per_epoch", per_epoch).add("epochs", epochs_));
    w.announced = per_epoch;
    w.announced_workers = static_cast<int>(who.of(epoch).size());  // the summary's starting count
  }
  if (w.step > 0 && w.step == start && epoch > 0 && epoch < epochs_ && w.step < total) epoch_end(w.step, epoch - 1, false);
  for (; epoch < epochs_ && w.step < w.total; ++epoch) {
    if (epoch_starts_.size() <= static_cast<std::size_t>(epoch)) epoch_starts_.push_back(w.step);
    w.epoch = epoch;
    w.start = epoch_starts_[static_cast<std::size_t>(epoch)];
    if (!run_epoch(w)) {
      retired_ = true;
      return w.step;
    }
    epoch_end(w.step, epoch, epoch + 1 == epochs_ || w.step >= w.total);
  }
  return w.step;
}

}  // namespace pstrain
