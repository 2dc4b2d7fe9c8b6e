// The single-worker trainer on a GPU with workload.cuda_graphs on and off:
// full batches replayed from a CUDA graph, the last partial batch of each
// epoch and the evaluations as usual in between (which may move the scratch
// memory the graph captured): the same test losses and accuracies, bit for
// bit, and the same steps. Skipped, with the reason printed, without a GPU.
#include <doctest/doctest.h>

#include <string>

#include "tests/support/skip.h"
#include "worker/nn/backend.h"
#include "worker/train/local_trainer.h"

namespace pstrain {
namespace {

LocalTrainResult run(bool graphs, const std::string& optimizer) {
  RunConfig config;
  config.workload.model = "fmnist_cnn";  // dropout: a per-step seed in the graph
  config.workload.dataset = "synthetic";
  config.workload.synthetic_train = 1000;  // 31 full batches of 32 and one of 8 per epoch
  config.workload.synthetic_test = 200;
  config.workload.batch_size = 32;
  config.workload.epochs = 2;
  config.workload.device = "cuda";
  config.workload.cuda_graphs = graphs;
  config.optimizer.name = optimizer;
  config.optimizer.lr = optimizer == "adam" ? 1e-3 : 0.05;
  config.optimizer.nesterov = optimizer == "sgd";
  config.schedule.decay = "cosine";  // the rate changes every step
  MetricsWriter metrics("", "worker-0.jsonl");
  Logger log("test", LogLevel::kWarn);
  return train_local(config, metrics, log);
}

TEST_CASE("train_local on a GPU: workload.cuda_graphs on and off give the same run, bit for bit") {
  std::string why_not;
  if (nn::make_cuda_backend(0, &why_not) == nullptr) {
    return pstrain::test::skip_case("no CUDA backend: " + why_not);
  }
  for (const char* optimizer : {"sgd", "adam"}) {
    CAPTURE(optimizer);
    const LocalTrainResult plain = run(false, optimizer);
    const LocalTrainResult graphed = run(true, optimizer);
    CHECK(graphed.steps == plain.steps);
    CHECK(graphed.images == plain.images);
    REQUIRE(graphed.epochs.size() == plain.epochs.size());
    for (std::size_t e = 0; e < plain.epochs.size(); ++e) {
      CAPTURE(e);
      CHECK(graphed.epochs[e].test_loss == plain.epochs[e].test_loss);
      CHECK(graphed.epochs[e].test_accuracy == plain.epochs[e].test_accuracy);
    }
    CHECK(plain.final_test_accuracy > 0.3);  // it learned (chance: 0.1)
  }
}

}  // namespace
}  // namespace pstrain
