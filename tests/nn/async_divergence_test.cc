// Async divergence reproduced on the CPU, deterministically: W virtual
// workers with a fixed injected staleness of W-1 updates (round-robin
// asynchrony, worker/train/delayed_sgd.h) train small_cnn on the real
// Fashion-MNIST. Under the old rules (lr scaled by the global batch of all
// workers, the servers' momentum 0.9 on top of the momentum asynchrony adds)
// the run collapses; with the rules the system now applies (lr scaled by the
// samples of one update, momentum lowered by 1 - 1/W) the same config trains.
#include <doctest/doctest.h>

#include "common/config/config.h"
#include "common/base/log.h"
#include "worker/train/delayed_sgd.h"
#include "worker/train/workload.h"

using namespace pstrain;

namespace {

// configs/default.toml's optimizer and schedule, with the small model.
RunConfig async_config(int workers) {
  RunConfig c = parse_config(R"(
mode = "async"
[workload]
model = "small_cnn"
dataset = "fashion-mnist"
data_path = "/usr/share/datasets/fashion-mnist"
batch_size = 64
seed = 1
device = "cpu"
threads = 2
[optimizer]
name = "sgd"
lr = 0.05
momentum = 0.9
nesterov = true
weight_decay = 5e-4
[schedule]
decay = "cosine"
warmup_epochs = 0.5
linear_scaling = true
base_batch = 64
)",
                             "async_divergence_test");
  c.cluster.num_workers = workers;
  return c;
}

DelayedSgdResult run(const RunConfig& config, std::int64_t updates) {
  Logger log("test", LogLevel::kWarn);
  Workload workload = make_workload(config, config.workload.batch_size, log);
  DelayedSgdOptions o;
  o.staleness = config.cluster.num_workers - 1;
  o.updates = updates;
  return run_delayed_sgd(config, workload, o, log);
}

}  // namespace

TEST_CASE("async with 8 workers: the old rules collapse, the system's rules train (injected staleness 7)") {
  constexpr std::int64_t kUpdates = 300;
  // The old rules: linear scaling by batch x workers (lr 0.4) and momentum 0.9 on the servers.
  RunConfig old_rules = async_config(8);
  old_rules.schedule.linear_scaling = false;
  old_rules.optimizer.lr = 0.05 * 8;
  old_rules.optimizer.momentum_correction = false;
  const DelayedSgdResult before = run(old_rules, kUpdates);
  CAPTURE(before.final_test_accuracy);
  CHECK(before.momentum == 0.9);
  CHECK((before.diverged || before.final_test_accuracy < 0.2));

  const DelayedSgdResult after = run(async_config(8), kUpdates);
  CAPTURE(after.final_test_accuracy);
  CHECK(after.lr == doctest::Approx(0.05));         // one batch per update: no scaling by the workers
  CHECK(after.momentum == doctest::Approx(0.025));  // 0.9 - (1 - 1/8)
  CHECK_FALSE(after.diverged);
  CHECK(after.final_test_accuracy > 0.5);
}
