#include "worker/train/records.h"

#include <cmath>
#include <cstdio>

namespace pstrain {

void write_step_record(MetricsWriter& metrics, const StepRecord& r) {
  JsonLine line;
  line.add("type", "step").add("time_s", metrics.elapsed_s()).add("step", r.step).add("epoch", r.epoch)
      .add("batch", r.batch);
  if (r.stats == nullptr) {
    line.raw("loss", "null").raw("accuracy", "null");
  } else {
    line.add("loss", r.stats->loss).add("accuracy", static_cast<double>(r.stats->correct) / r.batch);
  }
  metrics.write(line.add("images_per_s", r.batch / r.total_s).add("compute_ms", 1e3 * r.compute_s)
                    .add("pull_ms", 1e3 * r.pull_s).add("push_ms", 1e3 * r.push_s).add("lr", r.lr)
                    .add("staleness", r.staleness).add("simulated", r.stats == nullptr).add("skipped", r.skipped)
                    .add("job_s", metrics.job_s()));
}

void write_eval_record(MetricsWriter& metrics, Logger& log, std::int64_t step, int epoch, const EvalResult& r,
                       double time_s) {
  metrics.write(JsonLine().add("type", "eval").add("time_s", time_s).add("step", step)
                    .add("epoch", epoch).add("test_loss", r.loss).add("test_accuracy", r.accuracy)
                    .add("eval_s", metrics.elapsed_s() - time_s));
  char line[160];
  std::snprintf(line, sizeof(line), "epoch %d: test loss %.4f, test accuracy %.4f (step %lld, %.1f s)", epoch, r.loss,
                r.accuracy, static_cast<long long>(step), time_s);
  log.info(line);
}

void write_end_record(MetricsWriter& metrics, const TrainResult& r) {
  metrics.write(JsonLine().add("type", "end").add("time_s", r.time_s).add("steps", r.steps).add("images", r.images)
                    .add("compute_s", r.compute_s).add("pull_s", r.pull_s).add("push_s", r.push_s)
                    .add("blocked_s", r.blocked_s).add("skipped_steps", r.skipped_steps).add("retired", r.retired));
}

void write_resume_record(MetricsWriter& metrics, std::int64_t step) {
  metrics.write(JsonLine().add("type", "resume").add("time_s", metrics.elapsed_s()).add("step", step)
                    .add("job_s", metrics.job_s()));
}

void write_compute_record(MetricsWriter& metrics, const nn::Backend& backend) {
  const nn::ComputePath path = backend.compute_path();
  metrics.write(JsonLine().add("type", "compute").add("time_s", metrics.elapsed_s()).add("backend", backend.name())
                    .add("conv_path", path.conv).add("conv_detail", path.detail).add("precision", path.precision));
}

void log_progress(Logger& log, int epoch, std::int64_t step_in_epoch, std::int64_t steps_in_epoch, std::int64_t step,
                  double mean_loss, double images_per_s, double window_s) {
  char loss[48] = "";
  if (std::isfinite(mean_loss)) std::snprintf(loss, sizeof(loss), "loss %.4f, ", mean_loss);
  char line[200];
  std::snprintf(line, sizeof(line), "epoch %d step %lld/%lld (global %lld): %s%.0f images/s (last %.3g s)", epoch,
                static_cast<long long>(step_in_epoch + 1), static_cast<long long>(steps_in_epoch),
                static_cast<long long>(step), loss, images_per_s, window_s);
  log.info(line);
}

}  // namespace pstrain
