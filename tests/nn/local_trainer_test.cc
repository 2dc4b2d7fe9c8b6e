// The single-worker trainer end to end on the synthetic dataset.
#include <doctest/doctest.h>

#include "common/base/errors.h"
#include "worker/train/local_trainer.h"

namespace pstrain {
namespace {

RunConfig tiny_config() {
  RunConfig config;
  config.workload.model = "small_cnn";
  config.workload.dataset = "synthetic";
  config.workload.synthetic_train = 1024;
  config.workload.synthetic_test = 256;
  config.workload.batch_size = 32;
  config.workload.epochs = 3;
  config.workload.device = "cpu";
  config.workload.threads = 1;
  config.optimizer.name = "sgd";
  config.optimizer.lr = 0.05;
  config.optimizer.momentum = 0.9;
  config.schedule.decay = "cosine";
  return config;
}

TEST_CASE("train_local learns the synthetic task and evaluates every epoch") {
  RunConfig config = tiny_config();
  MetricsWriter metrics("", "worker-0.jsonl");  // no run directory: writes nothing
  Logger log("test", LogLevel::kWarn);
  const LocalTrainResult r = train_local(config, metrics, log);
  CHECK(r.steps == 3 * 32);
  CHECK(r.images == 3 * 1024);
  REQUIRE(r.epochs.size() == 3);
  CHECK(r.epochs[2].steps == 96);
  CHECK(r.final_test_accuracy == r.epochs[2].test_accuracy);
  CHECK(r.final_test_accuracy > 0.6);
  CHECK(r.epochs[2].test_loss < r.epochs[0].test_loss + 0.5);
}

TEST_CASE("train_local stops at max_steps, mid-epoch, and still evaluates") {
  RunConfig config = tiny_config();
  config.workload.max_steps = 40;  // one epoch is 32 steps
  config.optimizer.name = "adam";
  config.optimizer.lr = 1e-3;
  MetricsWriter metrics("", "worker-0.jsonl");
  Logger log("test", LogLevel::kWarn);
  const LocalTrainResult r = train_local(config, metrics, log);
  CHECK(r.steps == 40);
  REQUIRE(r.epochs.size() == 2);
  CHECK(r.epochs[1].steps == 40);
}

TEST_CASE("train_local rejects an invalid workload") {
  RunConfig config = tiny_config();
  config.workload.batch_size = 0;
  MetricsWriter metrics("", "worker-0.jsonl");
  Logger log("test", LogLevel::kWarn);
  CHECK_THROWS_WITH_AS(train_local(config, metrics, log),
                       "train_local: workload.batch_size 0 and workload.epochs 3 must both be >= 1", ConfigError);
  config = tiny_config();
  config.workload.model = "lenet";
  CHECK_THROWS_WITH_AS(train_local(config, metrics, log), "model 'lenet': unknown, known models: fmnist_cnn, small_cnn",
                       ConfigError);
}

}  // namespace
}  // namespace pstrain
