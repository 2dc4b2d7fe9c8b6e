// The rules that make one config train in every mode: linear scaling by the
// samples one update is made of, and the servers' momentum in async and ssp
// lowered by the momentum asynchrony adds.
#include <doctest/doctest.h>

#include "common/config/config.h"
#include "common/math/lr_schedule.h"
#include "common/math/optimizer.h"

using namespace pstrain;

namespace {

RunConfig config(Mode mode, int workers, double momentum = 0.9) {
  RunConfig c;
  c.mode = mode;
  c.cluster.num_workers = workers;
  c.workload.batch_size = 64;
  c.optimizer.name = "sgd";
  c.optimizer.lr = 0.05;
  c.optimizer.momentum = momentum;
  c.optimizer.nesterov = true;
  return c;
}

}  // namespace

TEST_CASE("samples per update: every worker's batch in sync and allreduce, one batch in async and ssp") {
  CHECK(samples_per_update(config(Mode::kSync, 4)) == 256);
  CHECK(samples_per_update(config(Mode::kAllreduce, 4)) == 256);
  CHECK(samples_per_update(config(Mode::kAsync, 4)) == 64);
  CHECK(samples_per_update(config(Mode::kSsp, 8)) == 64);
  // With linear scaling from base_batch 64, async keeps the configured rate.
  ScheduleConfig sc;
  sc.linear_scaling = true;
  sc.base_batch = 64;
  const RunConfig a = config(Mode::kAsync, 4);
  const RunConfig s = config(Mode::kSync, 4);
  CHECK(LrSchedule(a.optimizer, sc, 100, 100, samples_per_update(a)).base_lr() == doctest::Approx(0.05));
  CHECK(LrSchedule(s.optimizer, sc, 100, 100, samples_per_update(s)).base_lr() == doctest::Approx(0.2));
}

TEST_CASE("server momentum: lowered by 1 - 1/W in async and ssp, as configured in sync") {
  double implicit = -1;
  CHECK(server_optimizer(config(Mode::kSync, 4), &implicit).momentum == 0.9);
  CHECK(implicit == 0.0);
  const OptimizerConfig a2 = server_optimizer(config(Mode::kAsync, 2), &implicit);
  CHECK(a2.momentum == doctest::Approx(0.4));
  CHECK(implicit == doctest::Approx(0.5));
  CHECK(a2.nesterov);
  CHECK(server_optimizer(config(Mode::kSsp, 4)).momentum == doctest::Approx(0.15));
  CHECK(server_optimizer(config(Mode::kAsync, 1)).momentum == doctest::Approx(0.9));  // one worker: no asynchrony
  // Nothing left: plain SGD (Nesterov needs momentum).
  const OptimizerConfig a8 = server_optimizer(config(Mode::kAsync, 8, 0.5));
  CHECK(a8.momentum == 0.0);
  CHECK_FALSE(a8.nesterov);
  // Turned off, or Adam (no momentum term of this kind): as configured.
  RunConfig off = config(Mode::kAsync, 4);
  off.optimizer.momentum_correction = false;
  CHECK(server_optimizer(off).momentum == 0.9);
  RunConfig adam = config(Mode::kAsync, 4);
  adam.optimizer.name = "adam";
  CHECK(server_optimizer(adam).momentum == 0.9);
}
