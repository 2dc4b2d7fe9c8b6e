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
      num_samples_(train.num_samples), seed_(config.workload.seed), max_steps_(config.workload.max_steps),
      sampler_(train.num_samples, num_workers, rank, config.workload.seed),
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

std::int64_t EpochDriver::run(Logger& log, MetricsWriter& metrics, const std::int64_t& images, const StepFn& step_fn,
                              const EpochEndFn& epoch_end, std::int64_t first_step, EpochMembers* members) {
  EpochMembers everyone(EpochMembers::all_of(num_workers_));
  EpochMembers& who = members != nullptr ? *members : everyone;
  const auto sampler_of = [&](int epoch) {
    const EpochShard shard = epoch_shard(who.of(epoch), rank_);
    return std::pair(data::ShardSampler(num_samples_, shard.replicas, shard.position, seed_), shard);
  };
  const auto steps_of = [&](const data::ShardSampler& s) {
    return pstrain::steps_per_epoch(s.num_samples_per_replica(), batch_size_);
  };
  const auto planned_total = [&](std::int64_t start, int epoch, std::int64_t per_epoch) {
    const std::int64_t total = start + per_epoch * (epochs_ - epoch);
    return max_steps_ > 0 ? std::min(total, max_steps_) : total;
  };

  // Where first_step lies: the epochs before it, with the workers each had.
  const std::int64_t first = std::max<std::int64_t>(first_step, 0);
  epoch_starts_.clear();
  std::int64_t start = 0;
  int epoch = 0;
  std::int64_t per_epoch = per_epoch_;
  for (; epoch < epochs_; ++epoch) {
    epoch_starts_.push_back(start);
    per_epoch = steps_of(sampler_of(epoch).first);
    if (first < start + per_epoch) break;
    start += per_epoch;
  }
  std::int64_t total = planned_total(start, epoch, per_epoch);
  std::int64_t announced = per_epoch_;  // steps per epoch of the last "plan" record
  if (first_step <= 0) {
    metrics.write(JsonLine().add("type", "plan").add("time_s", metrics.elapsed_s()).add("total_steps", total)
                      .add("steps_per_epoch", per_epoch).add("epochs", epochs_));
    announced = per_epoch;
  }
  ProgressWindow window{images, metrics.elapsed_s(), 0.0, 0};
  std::int64_t step = first;
  if (step > 0 && step == start && epoch > 0 && epoch < epochs_ && step < total) epoch_end(step, epoch - 1, false);
  for (; epoch < epochs_ && step < total; ++epoch) {
    if (epoch_starts_.size() <= static_cast<std::size_t>(epoch)) epoch_starts_.push_back(step);
    start = epoch_starts_[static_cast<std::size_t>(epoch)];
    const auto [sampler, shard] = sampler_of(epoch);
    per_epoch = steps_of(sampler);
    total = planned_total(start, epoch, per_epoch);
    if (per_epoch != announced) {  // the live workers changed: a new plan from this epoch on
      metrics.write(JsonLine().add("type", "plan").add("time_s", metrics.elapsed_s()).add("total_steps", total)
                        .add("steps_per_epoch", per_epoch).add("epochs", epochs_).add("epoch", epoch)
                        .add("workers", shard.replicas));
      log.info("epoch " + std::to_string(epoch) + ": " + std::to_string(shard.replicas) + " workers (" +
               format_members(who.of(epoch)) + ") share the training set: " + std::to_string(per_epoch) +
               " steps per epoch, " + std::to_string(total) + " in all");
      announced = per_epoch;
    }
    if (!shard.member) {
      log.warn("epoch " + std::to_string(epoch) + " was begun by workers " + format_members(who.of(epoch)) +
               " before this worker was back: it repeats the shard of position " + std::to_string(shard.position) +
               " until the epoch ends");
    }
    const std::int64_t progress_every = std::max<std::int64_t>(per_epoch / 5, 1);
    const std::vector<std::int64_t> indices = sampler.indices(epoch);
    for (std::int64_t b = step - start; b < per_epoch && step < total; ++b, ++step) {
      const auto begin = static_cast<std::size_t>(b * batch_size_);
      const auto end = std::min(indices.size(), begin + static_cast<std::size_t>(batch_size_));
      const double loss = step_fn(std::span(indices).subspan(begin, end - begin), step, epoch,
                                  schedule_.lr_in_epoch(epoch, b, per_epoch));
      if (std::isfinite(loss)) window.loss_sum += loss, ++window.losses;
      if (rank_ == 0 && (b + 1) % progress_every == 0) {
        const double now = metrics.elapsed_s();
        log_progress(log, epoch, b, per_epoch, step, window.losses > 0 ? window.loss_sum / window.losses : std::nan(""),
                     static_cast<double>(images - window.images) / (now - window.time_s), now - window.time_s);
        window = ProgressWindow{images, now, 0.0, 0};
      }
    }
    epoch_end(step, epoch, epoch + 1 == epochs_ || step >= total);
  }
  return step;
}

}  // namespace pstrain
