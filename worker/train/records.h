// The metrics records every distributed training loop writes (format:
// docs/run_directory.md), in one place so the modes stay comparable.
#pragma once

#include <cstdint>

#include "common/base/log.h"
#include "worker/nn/model.h"
#include "worker/train/metrics.h"
#include "worker/train/workload.h"

namespace pstrain {

struct TrainResult {
  std::int64_t steps = 0;
  std::int64_t images = 0;
  double time_s = 0.0;
  double compute_s = 0.0;
  double pull_s = 0.0;   // PS: waiting for weights; allreduce: the local optimizer update
  double push_s = 0.0;   // PS: waiting for push acks; allreduce: the exposed allreduce wait
  double blocked_s = 0.0;  // PS: pulls held at the servers by the consistency policy (sync, ssp)
  double final_test_accuracy = -1.0;  // worker 0 only; -1 elsewhere
  std::int64_t skipped_steps = 0;     // workload.on_nonfinite "skip": steps whose update this worker dropped
  bool retired = false;  // a membership change left it out: it left at that step (the end record says so)
};

struct StepRecord {
  std::int64_t step = 0;
  int epoch = 0;
  int batch = 0;
  const nn::StepStats* stats = nullptr;  // null under simulated compute (loss/accuracy null)
  double total_s = 0.0, compute_s = 0.0, pull_s = 0.0, push_s = 0.0;
  double lr = 0.0;
  double staleness = 0.0;
  bool skipped = false;  // a non-finite loss or gradient: this worker's update dropped (on_nonfinite "skip")
};

void write_step_record(MetricsWriter& metrics, const StepRecord& r);
// Writes the eval record and logs the test loss and accuracy.
// time_s: the training time at which the evaluated weights existed (the
// evaluation's own duration goes into eval_s, not into the time axis, so a
// run's time to an accuracy never exceeds its training wall time).
void write_eval_record(MetricsWriter& metrics, Logger& log, std::int64_t step, int epoch, const EvalResult& r,
                       double time_s);
void write_end_record(MetricsWriter& metrics, const TrainResult& r);
// {"type": "resume", "time_s", "step", "job_s"}: this process resumed the run
// from the checkpoint of `step` (read by the summary: "resumed_from").
void write_resume_record(MetricsWriter& metrics, std::int64_t step);
// "compute": the backend this worker computes on, its conv path and precision
// (nn::ComputePath), written once the workload is built; summary.json's "compute".
void write_compute_record(MetricsWriter& metrics, const nn::Backend& backend);
// "epoch E step S/N (global G): loss L, X images/s (last T s)": the mean loss
// (left out when NaN) and the rate over the last `window_s` seconds.
void log_progress(Logger& log, int epoch, std::int64_t step_in_epoch, std::int64_t steps_in_epoch, std::int64_t step,
                  double mean_loss, double images_per_s, double window_s);

}  // namespace pstrain
