// CUDA graphs of whole training steps (worker/nn/cuda/step_graph.h) against
// the same steps run as usual: the same kernels on the same buffers with the
// same per-step values (dropout seeds, the optimizer's coefficients), so the
// losses, the correct counts and every weight must be equal bit for bit (fp32
// and tf32 alike: each path is deterministic run to run). A partial batch in
// the middle runs as usual and may move the scratch memory the graph captured
// (a recapture), and the rate changes every step. Skipped, with the reason
// printed, when no CUDA device is present.
#include <doctest/doctest.h>

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/config/config.h"
#include "tests/support/skip.h"
#include "worker/nn/backend.h"
#include "worker/nn/device_buffer.h"
#include "worker/nn/device_optimizer.h"
#include "worker/nn/model.h"
#include "worker/nn/model_spec.h"

namespace pstrain::nn {
namespace {

constexpr int kBatch = 48;
constexpr int kPartial = 17;
constexpr int kSteps = 9;
constexpr int kPartialStep = 4;  // this step has kPartial images

struct Run {
  std::vector<double> losses;
  std::vector<std::int64_t> correct;
  std::vector<float> params;
  int graph_steps = 0;  // steps begin_graph_step ran as a graph
};

// kSteps steps of fmnist_cnn (dropout included) on seeded data, each with its own rate.
Run train(const ComputeOptions& compute, const OptimizerConfig& opt, bool graphs) {
  std::string why_not;
  std::unique_ptr<Backend> backend = make_cuda_backend(0, &why_not, compute);
  REQUIRE(backend != nullptr);
  Model model(model_spec("fmnist_cnn", 1, 28, 28, 10), *backend, kBatch);
  model.init_params(3);
  DeviceOptimizer optimizer(opt, *backend, model.num_params());
  std::mt19937 rng(11);
  std::normal_distribution<float> pixel(0.0f, 1.0f);
  std::vector<float> images(static_cast<std::size_t>(kBatch) * 784);
  std::vector<std::int32_t> labels(kBatch);
  Run run;
  for (int step = 0; step < kSteps; ++step) {
    const int n = step == kPartialStep ? kPartial : kBatch;
    for (float& v : images) v = pixel(rng);
    for (std::int32_t& l : labels) l = static_cast<std::int32_t>(rng() % 10);
    const double lr = 0.05 / (1.0 + step);
    const bool graph = graphs && backend->begin_graph_step(n);
    StepStats stats = model.train_step(images.data(), labels.data(), n);
    optimizer.step(model.device_params(), model.device_grads(), lr);
    if (graph) {
      const Backend::XentResult r = backend->end_graph_step();
      stats.loss = r.loss_sum / n;
      stats.correct = r.correct;
      ++run.graph_steps;
    } else {
      backend->synchronize();
    }
    run.losses.push_back(stats.loss);
    run.correct.push_back(stats.correct);
  }
  run.params.resize(static_cast<std::size_t>(model.num_params()));
  model.get_params(run.params);
  return run;
}

bool has_gpu() {
  std::string why_not;
  if (make_cuda_backend(0, &why_not) != nullptr) return true;
  pstrain::test::skip_case("no CUDA backend: " + why_not);
  return false;
}

void check_equal(const Run& plain, const Run& graphed) {
  // The first full batch runs as usual (its memory is made), the partial one too, and the
  // step after it may again (a moved scratch block is captured again from a warm state).
  CHECK(graphed.graph_steps >= kSteps - 3);
  CHECK(plain.graph_steps == 0);
  for (int s = 0; s < kSteps; ++s) {
    CAPTURE(s);
    CHECK(graphed.losses[static_cast<std::size_t>(s)] == plain.losses[static_cast<std::size_t>(s)]);
    CHECK(graphed.correct[static_cast<std::size_t>(s)] == plain.correct[static_cast<std::size_t>(s)]);
  }
  REQUIRE(graphed.params.size() == plain.params.size());
  std::size_t differing = 0;
  for (std::size_t i = 0; i < plain.params.size(); ++i) differing += graphed.params[i] != plain.params[i] ? 1 : 0;
  CHECK(differing == 0);
}

TEST_CASE("CUDA graphs: steps replayed from a graph give the weights of steps run as usual, bit for bit") {
  if (!has_gpu()) return;
  OptimizerConfig sgd;
  sgd.momentum = 0.9;
  sgd.nesterov = true;
  sgd.weight_decay = 5e-4;
  for (const bool tf32 : {false, true}) {
    CAPTURE(tf32);
    ComputeOptions compute;
    compute.tf32 = tf32;
    check_equal(train(compute, sgd, false), train(compute, sgd, true));
  }
  OptimizerConfig adam;
  adam.name = "adam";
  adam.lr = 1e-3;
  check_equal(train({}, adam, false), train({}, adam, true));  // the step count changes every step
}

TEST_CASE("CUDA graphs: the own conv kernels replay alike; misuse is a clear error") {
  if (!has_gpu()) return;
  OptimizerConfig sgd;
  ComputeOptions own;
  own.cudnn = false;
  check_equal(train(own, sgd, false), train(own, sgd, true));

  std::string why_not;
  std::unique_ptr<Backend> backend = make_cuda_backend(0, &why_not);
  REQUIRE(backend != nullptr);
  CHECK_THROWS_WITH_AS(backend->end_graph_step(), doctest::Contains("end_graph_step without begin_graph_step"),
                       ComputeError);
  CHECK_FALSE(backend->begin_graph_step(8));  // a key's first step runs as usual
  CHECK(backend->begin_graph_step(8));        // the second is captured
  CHECK_THROWS_WITH_AS(backend->end_graph_step(), doctest::Contains("computed no loss"), ComputeError);
  CHECK_FALSE(backend->begin_graph_step(8));  // the failed capture was discarded: as usual again
  CHECK(backend->begin_graph_step(8));
  backend->abort_graph_step();
  std::vector<float> host(4);
  DeviceBuffer buffer(*backend, 16);
  backend->copy_to_host(host.data(), buffer.f32(), 16);  // usable after the abort

  // Two models under one key: the second's replay would run the first's buffers; refused.
  Model a(model_spec("small_cnn", 1, 28, 28, 10), *backend, 8), b(model_spec("small_cnn", 1, 28, 28, 10), *backend, 8);
  DeviceOptimizer opt_a(sgd, *backend, a.num_params()), opt_b(sgd, *backend, b.num_params());
  const std::vector<float> images(8 * 784, 0.5f);
  const std::vector<std::int32_t> labels(8, 3);
  const auto step = [&](Model& m, DeviceOptimizer& opt) {
    const bool graph = backend->begin_graph_step(16);
    m.train_step(images.data(), labels.data(), 8);
    opt.step(m.device_params(), m.device_grads(), 0.01);
    if (graph) {
      backend->end_graph_step();
    } else {
      backend->synchronize();
    }
    return graph;
  };
  CHECK_FALSE(step(a, opt_a));
  CHECK(step(a, opt_a));
  CHECK(step(a, opt_a));
  CHECK_THROWS_WITH_AS(step(b, opt_b), doctest::Contains("used other buffers than its capture"), ComputeError);
  CHECK_FALSE(step(b, opt_b));  // the key starts over: as usual, then captured for b
  CHECK(step(b, opt_b));
  CHECK(step(b, opt_b));
}

}  // namespace
}  // namespace pstrain::nn
