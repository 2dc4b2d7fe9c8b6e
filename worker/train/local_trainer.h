// Single-worker training without servers: the reference run every
// distributed mode is compared with. Trains config.workload (model, data,
// backend, batch, epochs / max_steps, seed) with config.optimizer and
// config.schedule; config.mode and the cluster settings are ignored.
//
// The update runs on the backend (nn::DeviceOptimizer: Backend::sgd_step /
// adam_step on the model's flat buffers, the formulas of common/math/optimizer.h;
// SGD is bit-identical to the host optimizer on the CPU), so a GPU run never
// copies parameters to the host. The learning rate comes from LrSchedule
// with global batch = batch_size. With workload.cuda_graphs on a CUDA backend, each
// full batch's step (forward, backward, update) runs as one CUDA graph
// (nn::Backend::begin_graph_step; the same results, bit for bit).
//
// Logs progress lines (~10 per epoch: epoch, step, mean loss and training
// accuracy over the last steps, lr, images/s) and each epoch's test accuracy;
// writes "step", "eval" and "end" records to `metrics` (format in
// docs/run_directory.md). Throws the loaders' / backend's / config errors.
#pragma once

#include <cstdint>
#include <vector>

#include "common/config/config.h"
#include "common/base/log.h"
#include "worker/train/metrics.h"

namespace pstrain {

struct LocalEpochResult {
  int epoch = 0;                 // 0-based
  std::int64_t steps = 0;        // steps taken so far
  double test_loss = 0.0;
  double test_accuracy = 0.0;
  double time_s = 0.0;           // since training started (evaluation time excluded)
};

struct LocalTrainResult {
  std::int64_t steps = 0;
  std::int64_t images = 0;
  double train_time_s = 0.0;     // forward/backward/update, evaluation excluded
  double final_test_loss = 0.0;
  double final_test_accuracy = 0.0;
  std::vector<LocalEpochResult> epochs;  // one per finished epoch (the last may be partial)
};

LocalTrainResult train_local(const RunConfig& config, MetricsWriter& metrics, Logger& log);

}  // namespace pstrain
