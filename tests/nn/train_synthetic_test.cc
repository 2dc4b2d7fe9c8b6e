// End to end on the CPU: small_cnn learns the synthetic dataset in a few
// hundred SGD steps (loss falls, test accuracy far above chance).
#include <doctest/doctest.h>

#include <numeric>

#include "worker/data/shard_sampler.h"
#include "worker/data/synthetic.h"
#include "worker/nn/device_optimizer.h"
#include "worker/nn/model.h"

namespace pstrain::nn {
namespace {

double accuracy(Model& model, const data::Dataset& set) {
  std::int64_t correct = 0;
  const int batch = model.max_batch();
  for (std::int64_t start = 0; start < set.num_samples; start += batch) {
    const int n = static_cast<int>(std::min<std::int64_t>(batch, set.num_samples - start));
    correct += model.evaluate(set.images.data() + start * set.sample_num_elems(), set.labels.data() + start, n).correct;
  }
  return static_cast<double>(correct) / static_cast<double>(set.num_samples);
}

TEST_CASE("small_cnn learns the synthetic dataset") {
  const data::DatasetPair sets = data::make_synthetic_pair(2048, 512, 17);
  auto backend = make_cpu_backend(1);
  const int batch = 32;
  Model model(model_spec("small_cnn", 1, 28, 28, 10), *backend, batch);
  model.init_params(3);
  OptimizerConfig sgd;
  sgd.name = "sgd";
  sgd.lr = 0.05;
  sgd.momentum = 0.9;
  DeviceOptimizer optimizer(sgd, *backend, model.num_params());

  const double initial_accuracy = accuracy(model, sets.test);
  std::vector<double> losses;
  std::vector<float> images(static_cast<std::size_t>(batch * sets.train.sample_num_elems()));
  std::vector<std::int32_t> labels(static_cast<std::size_t>(batch));
  for (int epoch = 0; epoch < 5; ++epoch) {  // 5 x 64 = 320 steps
    const auto order = data::epoch_permutation(sets.train.num_samples, 5, epoch);
    for (std::size_t start = 0; start + batch <= order.size(); start += batch) {
      sets.train.gather(std::span(order).subspan(start, batch), images.data(), labels.data());
      losses.push_back(model.train_step(images.data(), labels.data(), batch).loss);
      optimizer.step(model.device_params(), model.device_grads(), sgd.lr);
    }
  }
  auto mean = [](auto first, auto last) { return std::accumulate(first, last, 0.0) / static_cast<double>(last - first); };
  const double first_loss = mean(losses.begin(), losses.begin() + 20);
  const double last_loss = mean(losses.end() - 20, losses.end());
  const double final_accuracy = accuracy(model, sets.test);
  MESSAGE("synthetic: loss " << first_loss << " -> " << last_loss << ", test accuracy " << initial_accuracy << " -> "
                             << final_accuracy << " after " << losses.size() << " steps");
  CHECK(losses.size() == 320);
  CHECK(last_loss < 0.5 * first_loss);
  CHECK(final_accuracy > 0.6);
}

}  // namespace
}  // namespace pstrain::nn
