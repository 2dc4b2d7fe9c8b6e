#include "worker/train/workload.h"

#include <algorithm>
#include <numeric>
#include <vector>

#include "worker/data/load_dataset.h"
#include "worker/nn/model_spec.h"

namespace pstrain {

namespace {

// Simulated compute reads no images: only the dataset's shape and size, so
// that 32 simulated workers on one machine cost no dataset memory.
data::DatasetPair shape_only(const WorkloadConfig& w) {
  data::Dataset train;
  train.name = w.dataset + "/train (shape only: simulated compute)";
  train.channels = w.dataset == "cifar10" ? 3 : 1;
  train.height = train.width = w.dataset == "cifar10" ? 32 : 28;
  train.num_classes = 10;
  train.num_samples = w.dataset == "synthetic" ? w.synthetic_train : w.dataset == "cifar10" ? 50000 : 60000;
  data::Dataset test = train;
  test.name = w.dataset + "/test (shape only)";
  test.num_samples = 0;
  return {std::move(train), std::move(test)};
}

}  // namespace

Workload make_workload(const RunConfig& config, int max_batch, Logger& log, int threads) {
  const WorkloadConfig& w = config.workload;
  data::LoadOptions load;
  load.seed = w.seed;
  load.synthetic_train = w.synthetic_train;
  load.synthetic_test = w.synthetic_test;
  load.synthetic_noise = w.synthetic_noise;
  Workload out;
  const bool simulated = w.simulated_step_ms > 0.0;
  out.data = simulated ? shape_only(w) : data::load_dataset(w.dataset, w.data_path, load);
  if (simulated) max_batch = 1;  // the model only provides the layout
  std::string chosen;
  nn::ComputeOptions compute;
  compute.tf32 = w.precision == "tf32";
  out.backend = nn::make_backend(w.device, threads > 0 ? threads : w.threads, &chosen, compute);
  const nn::ComputePath path = out.backend->compute_path();
  log.info(chosen + "; convolutions: " + path.conv + " (" + path.detail + "), precision " + path.precision);
  const data::Dataset& train = out.data.train;
  const nn::ModelSpec spec = nn::model_spec(w.model, train.channels, train.height, train.width, train.num_classes);
  out.model = std::make_unique<nn::Model>(spec, *out.backend, max_batch);
  out.model->init_params(w.seed);
  log.info("model " + w.model + ": " + std::to_string(out.model->num_params()) + " parameters; data " +
           train.name + " (" + std::to_string(train.num_samples) + " train, " +
           std::to_string(out.data.test.num_samples) + " test)");
  return out;
}

EvalResult evaluate(nn::Model& model, const data::Dataset& set) {
  const int max_batch = model.max_batch();
  const std::size_t image_elems = static_cast<std::size_t>(set.channels) * static_cast<std::size_t>(set.height) *
                                  static_cast<std::size_t>(set.width);
  std::vector<float> images(image_elems * static_cast<std::size_t>(max_batch));
  std::vector<std::int32_t> labels(static_cast<std::size_t>(max_batch));
  std::vector<std::int64_t> indices;
  double loss_sum = 0.0;
  std::int64_t correct = 0;
  for (std::int64_t start = 0; start < set.num_samples; start += max_batch) {
    const std::int64_t count = std::min<std::int64_t>(max_batch, set.num_samples - start);
    indices.resize(static_cast<std::size_t>(count));
    std::iota(indices.begin(), indices.end(), start);
    set.gather(indices, images.data(), labels.data());
    const nn::EvalStats s = model.evaluate(images.data(), labels.data(), static_cast<int>(count));
    loss_sum += s.loss * static_cast<double>(count);
    correct += s.correct;
  }
  const auto n = static_cast<double>(std::max<std::int64_t>(set.num_samples, 1));
  return EvalResult{loss_sum / n, static_cast<double>(correct) / n};
}

int cuda_device_index(const nn::Backend& backend) {
  if (!backend.is_cuda()) return -1;
  const std::string name = backend.name();
  if (name.rfind("cuda:", 0) != 0) return 0;
  int index = 0;
  for (std::size_t i = 5; i < name.size() && name[i] >= '0' && name[i] <= '9'; ++i) index = index * 10 + (name[i] - '0');
  return index;
}

}  // namespace pstrain
