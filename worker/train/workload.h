// What one worker trains: the dataset (its training shard is chosen by the
// sampler at run time), the compute backend and the model on it, all from
// the run config. Shared by the single-worker trainer and the distributed
// workers, so every mode trains exactly the same thing.
#pragma once

#include <memory>
#include <string>

#include "common/config/config.h"
#include "common/base/log.h"
#include "worker/data/dataset.h"
#include "worker/nn/backend.h"
#include "worker/nn/model.h"

namespace pstrain {

struct Workload {
  data::DatasetPair data;
  std::unique_ptr<nn::Backend> backend;
  std::unique_ptr<nn::Model> model;  // parameters initialized from workload.seed
};

// Loads the data, picks the backend (logs which and why), builds the model
// with room for `max_batch` images. `threads` = 0 uses config.workload.threads.
// With simulated compute (workload.simulated_step_ms > 0) no images are
// loaded: the datasets carry only their shape and size.
Workload make_workload(const RunConfig& config, int max_batch, Logger& log, int threads = 0);

// The CUDA device `backend` computes on (its name starts "cuda:N"), -1 for
// any other backend: the GPU a worker's resource sampler reads through NVML.
int cuda_device_index(const nn::Backend& backend);

struct EvalResult {
  double loss = 0.0;      // mean over the set
  double accuracy = 0.0;  // fraction correct
};

// Evaluates the model's current parameters on the whole set, in batches of
// at most model.max_batch(). Dropout off, gradients untouched.
EvalResult evaluate(nn::Model& model, const data::Dataset& set);

}  // namespace pstrain
