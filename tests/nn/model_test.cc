// Model: layouts and parameter counts, deterministic init, host transfers,
// the gradient-ready callback, whole-model gradients, and validation.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>

#include "common/base/errors.h"
#include "nn_test_util.h"
#include "common/config/model_names.h"
#include "worker/nn/model.h"
#include "worker/nn/model_spec.h"

namespace pstrain::nn {
namespace {

using testing::random_values;

std::vector<std::int32_t> labels_for(int batch) {
  std::vector<std::int32_t> labels(static_cast<std::size_t>(batch));
  for (int i = 0; i < batch; ++i) labels[static_cast<std::size_t>(i)] = (i * 7) % 10;
  return labels;
}

TEST_CASE("fmnist_cnn has the benchmark's layout and 3,274,634 parameters") {
  auto backend = make_cpu_backend(1);
  Model model(model_spec("fmnist_cnn", 1, 28, 28, 10), *backend, 4);
  CHECK(model.num_params() == 3274634);
  std::vector<std::string> names;
  for (const auto& t : model.layout().tensors()) names.push_back(t.name);
  CHECK(names == std::vector<std::string>{"conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias", "fc1.weight",
                                          "fc1.bias", "fc2.weight", "fc2.bias"});
  CHECK(model.layout().find("conv2.weight").shape == std::vector<std::int64_t>{64, 32, 5, 5});
  CHECK(model.layout().find("fc1.weight").shape == std::vector<std::int64_t>{1024, 3136});
  model.layout().validate();
}

TEST_CASE("small_cnn is small and both models take CIFAR-shaped input") {
  auto backend = make_cpu_backend(1);
  CHECK(Model(model_spec("small_cnn", 1, 28, 28, 10), *backend, 2).num_params() == 9098);
  CHECK(Model(model_spec("small_cnn", 3, 32, 32, 10), *backend, 2).num_params() == 224 + 1168 + 10250);
  CHECK(Model(model_spec("fmnist_cnn", 3, 32, 32, 10), *backend, 2).layout().find("fc1.weight").shape ==
        std::vector<std::int64_t>{1024, 4096});
}

TEST_CASE("unknown models and bad shapes are config errors") {
  auto backend = make_cpu_backend(1);
  CHECK_THROWS_WITH_AS(model_spec("resnet50", 1, 28, 28, 10), "model 'resnet50': unknown, known models: fmnist_cnn, small_cnn",
                       ConfigError);
  CHECK_THROWS_WITH_AS(model_spec("small_cnn", 1, 0, 28, 10),
                       "model 'small_cnn': input 1x0x28 with 10 classes: every dimension must be positive", ConfigError);
  CHECK_THROWS_WITH_AS(Model(model_spec("fmnist_cnn", 1, 1, 1, 10), *backend, 2),
                       "model 'fmnist_cnn': layer 2 (maxpool2d) on input 32x1x1: maxpool layer [n=2 c=32 h=1 w=1 k=2 "
                       "stride=2]: window 2 larger than input 1x1",
                       ConfigError);
  CHECK_THROWS_WITH_AS(Model(model_spec("small_cnn", 1, 28, 28, 10), *backend, 0),
                       "model 'small_cnn': max batch 0, expected >= 1", ConfigError);
  ModelSpec no_layers{"empty", 10, 1, 1, 10, {}};
  CHECK_THROWS_WITH_AS(Model(no_layers, *backend, 1), "model 'empty': has no layers", ConfigError);
  ModelSpec wrong_head{"head", 1, 4, 4, 10, {flatten(), linear("fc", 7, WeightInit::kGlorot)}};
  CHECK_THROWS_WITH_AS(Model(wrong_head, *backend, 1),
                       "model 'head': last layer outputs 7x1x1, expected 10x1x1 (one logit per class)", ConfigError);
  ModelSpec bad_dropout{"drop", 1, 4, 4, 16, {flatten(), dropout(1.5f)}};
  CHECK_THROWS_WITH_AS(Model(bad_dropout, *backend, 1),
                       "model 'drop': layer 1 (dropout) on input 16x1x1: dropout layer: drop probability 1.500000 is "
                       "outside [0, 1)",
                       ConfigError);
}

TEST_CASE("init is deterministic per seed: He/Glorot bounds, zero biases") {
  auto backend = make_cpu_backend(1);
  const ModelSpec spec = model_spec("fmnist_cnn", 1, 28, 28, 10);
  Model a(spec, *backend, 2), b(spec, *backend, 2);
  std::vector<float> pa(static_cast<std::size_t>(a.num_params())), pb(pa.size());
  a.init_params(42);
  b.init_params(42);
  a.get_params(pa);
  b.get_params(pb);
  CHECK(std::memcmp(pa.data(), pb.data(), pa.size() * sizeof(float)) == 0);
  b.init_params(43);
  b.get_params(pb);
  CHECK(pa != pb);

  const auto& layout = a.layout();
  auto slice = [&](const std::string& name) {
    const auto& t = layout.find(name);
    return std::vector<float>(pa.begin() + t.offset, pa.begin() + t.offset + t.num_elems);
  };
  for (const char* bias : {"conv1.bias", "conv2.bias", "fc1.bias", "fc2.bias"}) {
    CHECK(slice(bias) == std::vector<float>(slice(bias).size(), 0.0f));
  }
  const auto conv2 = slice("conv2.weight");
  const double he_bound = std::sqrt(6.0 / (32 * 25));
  double max_abs = 0.0, sum_sq = 0.0;
  for (float w : conv2) {
    max_abs = std::max(max_abs, std::abs(static_cast<double>(w)));
    sum_sq += static_cast<double>(w) * w;
  }
  CHECK(max_abs <= he_bound);
  CHECK(max_abs > 0.99 * he_bound);
  CHECK(std::sqrt(sum_sq / static_cast<double>(conv2.size())) == doctest::Approx(he_bound / std::sqrt(3.0)).epsilon(0.02));
  double fc2_max = 0.0;
  for (float w : slice("fc2.weight")) fc2_max = std::max(fc2_max, std::abs(static_cast<double>(w)));
  CHECK(fc2_max <= std::sqrt(6.0 / (1024 + 10)));
}

TEST_CASE("set_params/get_params round trip; sizes and ranges are checked") {
  auto backend = make_cpu_backend(1);
  Model model(model_spec("small_cnn", 1, 28, 28, 10), *backend, 2);
  const auto values = random_values(static_cast<std::size_t>(model.num_params()), 3);
  model.set_params(values);
  std::vector<float> back(values.size());
  model.get_params(back);
  CHECK(back == values);
  std::vector<float> wrong(5);
  CHECK_THROWS_WITH_AS(model.set_params(wrong), "set_params: host buffer has 5 floats, the layout has 9098", ComputeError);
  CHECK_THROWS_WITH_AS(model.get_params(wrong), "get_params: host buffer has 5 floats, the layout has 9098", ComputeError);
  CHECK_THROWS_WITH_AS(model.get_grads(wrong), "get_grads: host buffer has 5 floats, the layout has 9098", ComputeError);
  CHECK_THROWS_WITH_AS(model.get_grads(9095, wrong), "get_grads: range [9095, 9100) outside the 9098 parameters",
                       ComputeError);
  CHECK_THROWS_WITH_AS(model.get_grads(-1, wrong), "get_grads: range [-1, 4) outside the 9098 parameters", ComputeError);
}

TEST_CASE("train_step checks the batch and the labels") {
  auto backend = make_cpu_backend(1);
  Model model(model_spec("small_cnn", 1, 28, 28, 10), *backend, 2);
  model.init_params(1);
  const auto images = random_values(3 * 784, 4);
  auto labels = labels_for(3);
  CHECK_THROWS_WITH_AS(model.train_step(images.data(), labels.data(), 3), "train_step: batch 3 outside [1, 2]",
                       ComputeError);
  CHECK_THROWS_WITH_AS(model.evaluate(images.data(), labels.data(), 0), "evaluate: batch 0 outside [1, 2]", ComputeError);
  labels[1] = 10;
  CHECK_THROWS_WITH_AS(model.train_step(images.data(), labels.data(), 2),
                       "train_step: label of sample 1 is 10, expected 0..9", ComputeError);
}

TEST_CASE("gradients become ready layer by layer in backward order and cover the layout") {
  auto backend = make_cpu_backend(1);
  Model model(model_spec("fmnist_cnn", 1, 28, 28, 10), *backend, 8);
  model.init_params(5);
  const auto images = random_values(8 * 784, 6);
  const auto labels = labels_for(8);
  std::vector<std::pair<std::int64_t, std::int64_t>> ready;
  std::vector<float> early(static_cast<std::size_t>(model.num_params()));
  const auto stats = model.train_step(images.data(), labels.data(), 8, [&](std::int64_t offset, std::int64_t count) {
    ready.emplace_back(offset, count);
    model.get_grads(offset, std::span<float>(early).subspan(static_cast<std::size_t>(offset), static_cast<std::size_t>(count)));
  });
  CHECK(stats.batch == 8);
  CHECK(stats.loss > 0.0);
  const auto& t = model.layout().tensors();
  REQUIRE(ready.size() == 4);
  CHECK(ready[0] == std::pair<std::int64_t, std::int64_t>{t[6].offset, t[6].num_elems + t[7].num_elems});  // fc2
  CHECK(ready[3] == std::pair<std::int64_t, std::int64_t>{0, t[0].num_elems + t[1].num_elems});           // conv1
  std::int64_t covered = 0;
  for (std::size_t i = 0; i < ready.size(); ++i) {
    covered += ready[i].second;
    if (i > 0) CHECK(ready[i].first + ready[i].second == ready[i - 1].first);
  }
  CHECK(covered == model.num_params());
  std::vector<float> final_grads(early.size());
  model.get_grads(final_grads);
  CHECK(early == final_grads);  // nothing changed a range after it was reported
}

TEST_CASE("same seed and data give bit-identical steps; evaluate leaves gradients alone") {
  auto backend = make_cpu_backend(1);
  const ModelSpec spec = model_spec("fmnist_cnn", 1, 28, 28, 10);
  const auto images = random_values(4 * 784, 7);
  const auto labels = labels_for(4);
  auto run = [&](std::vector<float>& grads) {
    Model model(spec, *backend, 4);
    model.init_params(9);
    model.train_step(images.data(), labels.data(), 4);
    const auto stats = model.train_step(images.data(), labels.data(), 4);  // step 2: another dropout mask
    grads.resize(static_cast<std::size_t>(model.num_params()));
    model.get_grads(grads);
    const auto e1 = model.evaluate(images.data(), labels.data(), 4);
    const auto e2 = model.evaluate(images.data(), labels.data(), 4);
    CHECK(e1.loss == e2.loss);  // no dropout in evaluation
    std::vector<float> after(grads.size());
    model.get_grads(after);
    CHECK(after == grads);
    return stats.loss;
  };
  std::vector<float> g1, g2;
  const double loss1 = run(g1), loss2 = run(g2);
  CHECK(loss1 == loss2);
  CHECK(std::memcmp(g1.data(), g2.data(), g1.size() * sizeof(float)) == 0);
}

void check_model_gradients(const ModelSpec& spec) {
  auto backend = make_cpu_backend(1);
  Model model(spec, *backend, 3);
  model.init_params(11);
  const auto images = random_values(3 * 144, 12);
  const auto labels = labels_for(3);
  model.train_step(images.data(), labels.data(), 3);
  std::vector<float> params(static_cast<std::size_t>(model.num_params())), grads(params.size());
  model.get_params(params);
  model.get_grads(grads);
  // Every 7th parameter, plus all biases of conv1 (the first layer, computed without dx).
  std::vector<std::size_t> picked;
  for (std::size_t i = 0; i < params.size(); i += 7) picked.push_back(i);
  const auto& conv1_bias = model.layout().find("conv1.bias");
  for (std::int64_t i = 0; i < conv1_bias.num_elems; ++i) picked.push_back(static_cast<std::size_t>(conv1_bias.offset + i));
  auto loss_with = [&](std::size_t index, float value) {
    const float saved = params[index];
    params[index] = value;
    model.set_params(params);
    params[index] = saved;
    return model.evaluate(images.data(), labels.data(), 3).loss;
  };
  // ReLU and max pooling have kinks: a step that crosses one spoils the
  // difference quotient, so a parameter passes when the quotient agrees for
  // some step size (smaller steps cross fewer kinks).
  std::size_t bad = 0;
  for (std::size_t i : picked) {
    bool agrees = false;
    std::string tried;
    for (const float eps : {5e-3f, 1e-3f, 2.5e-4f}) {
      const double numeric = (loss_with(i, params[i] + eps) - loss_with(i, params[i] - eps)) / (2.0 * eps);
      agrees = agrees || std::abs(numeric - grads[i]) <= 5e-4 + 2e-2 * std::abs(numeric);
      tried += ' ';
      tried += std::to_string(numeric);
    }
    if (!agrees) {
      ++bad;
      MESSAGE("param " << i << ": analytic " << grads[i] << ", numeric" << tried);
    }
  }
  INFO(picked.size() << " parameters checked");
  CHECK(bad == 0);
}

TEST_CASE("whole-model gradients match finite differences of the mean loss") {
  ModelSpec smooth{"smooth", 1, 12, 12, 10, {conv2d("conv1", 4, 3, 1, 1, WeightInit::kHe),
      conv2d("conv2", 4, 3, 2, 1, WeightInit::kHe), flatten(), linear("fc1", 10, WeightInit::kGlorot)}};
  check_model_gradients(smooth);
  check_model_gradients(model_spec("small_cnn", 1, 12, 12, 10));
}

}  // namespace
}  // namespace pstrain::nn

TEST_CASE("the launcher's list of model names is exactly what model_spec builds") {
  for (const std::string_view name : pstrain::kModelNames) {
    CHECK(pstrain::is_known_model(name));
    CHECK_NOTHROW(pstrain::nn::model_spec(name, 1, 28, 28, 10));
  }
  CHECK(pstrain::nn::known_models() == std::vector<std::string>(pstrain::kModelNames.begin(), pstrain::kModelNames.end()));
  CHECK_FALSE(pstrain::is_known_model("resnet50"));
  CHECK_THROWS_AS(pstrain::nn::model_spec("resnet50", 1, 28, 28, 10), pstrain::ConfigError);
}
