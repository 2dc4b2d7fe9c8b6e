#include "worker/train/epoch_driver.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/errors.h"
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
    : batch_size_(config.workload.batch_size), epochs_(config.workload.epochs), rank_(rank),
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

std::int64_t EpochDriver::run(Logger& log, MetricsWriter& metrics, const std::int64_t& images, const StepFn& step_fn,
                              const EpochEndFn& epoch_end, std::int64_t first_step) const {
  const std::int64_t progress_every = std::max<std::int64_t>(per_epoch_ / 5, 1);
  if (first_step <= 0) {
    metrics.write(JsonLine().add("type", "plan").add("time_s", metrics.elapsed_s()).add("total_steps", total_)
                      .add("steps_per_epoch", per_epoch_).add("epochs", epochs_));
  }
  ProgressWindow window{images, metrics.elapsed_s(), 0.0, 0};
  std::int64_t step = std::max<std::int64_t>(first_step, 0);
  const int first_epoch = static_cast<int>(step / per_epoch_);
  if (step > 0 && step % per_epoch_ == 0 && step < total_) epoch_end(step, first_epoch - 1, false);
  for (int epoch = first_epoch; epoch < epochs_ && step < total_; ++epoch) {
    const std::vector<std::int64_t> indices = sampler_.indices(epoch);
    for (std::int64_t b = epoch == first_epoch ? step % per_epoch_ : 0; b < per_epoch_ && step < total_; ++b, ++step) {
      const auto begin = static_cast<std::size_t>(b * batch_size_);
      const auto end = std::min(indices.size(), begin + static_cast<std::size_t>(batch_size_));
      const double loss = step_fn(std::span(indices).subspan(begin, end - begin), step, epoch, schedule_.lr_at(step));
      if (std::isfinite(loss)) window.loss_sum += loss, ++window.losses;
      if (rank_ == 0 && (b + 1) % progress_every == 0) {
        const double now = metrics.elapsed_s();
        log_progress(log, epoch, b, per_epoch_, step, window.losses > 0 ? window.loss_sum / window.losses : std::nan(""),
                     static_cast<double>(images - window.images) / (now - window.time_s), now - window.time_s);
        window = ProgressWindow{images, now, 0.0, 0};
      }
    }
    epoch_end(step, epoch, epoch + 1 == epochs_ || step >= total_);
  }
  return step;
}

}  // namespace pstrain
