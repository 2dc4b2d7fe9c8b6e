// The learning-rate schedule follows a re-plan: after a drop the survivors'
// epochs have more steps, and the rate of each step is the schedule's at the
// same fraction of training, so step decays land on the same epochs and a
// cosine reaches min_lr at the end of the last epoch, as without the drop.
#include <doctest/doctest.h>

#include <cstdio>
#include <map>
#include <vector>

#include "common/config/config.h"
#include "common/base/log.h"
#include "common/math/lr_schedule.h"
#include "worker/data/synthetic.h"
#include "worker/train/epoch_driver.h"
#include "worker/train/epoch_members.h"
#include "worker/train/metrics.h"

namespace {

struct Taken {
  std::int64_t step;
  int epoch;
  double lr;
};

// Runs worker 0's schedule of a 3-worker job, 1200 samples, batch 20 (20
// steps an epoch with 3 workers, 30 with 2); from epoch `drop_at` on (-1:
// never) worker 2 is gone.
std::vector<Taken> run(const pstrain::RunConfig& config, int drop_at) {
  const pstrain::data::Dataset train = pstrain::data::make_synthetic(1200, 1);
  pstrain::EpochDriver driver(config, train, 0, 3);
  pstrain::EpochMembers members([drop_at](int epoch) {
    return drop_at >= 0 && epoch >= drop_at ? std::vector<int>{0, 1} : std::vector<int>{0, 1, 2};
  });
  pstrain::Logger log("test", pstrain::LogLevel::kWarn);
  pstrain::MetricsWriter metrics("", "worker-0.jsonl");
  const std::int64_t images = 0;
  std::vector<Taken> taken;
  driver.run(
      log, metrics, images,
      [&](std::span<const std::int64_t>, std::int64_t step, int epoch, double lr) {
        taken.push_back({step, epoch, lr});
        return 0.0;
      },
      [](std::int64_t, int, bool) {}, 0, &members);
  return taken;
}

pstrain::RunConfig six_epochs(const char* decay) {
  pstrain::RunConfig config;
  config.mode = pstrain::Mode::kSync;
  config.cluster.num_workers = 3;
  config.workload.batch_size = 20;
  config.workload.epochs = 6;
  config.optimizer.lr = 0.1;
  config.schedule.decay = decay;
  return config;
}

}  // namespace

TEST_CASE("step decay after a re-plan: the rate changes at the same epochs as without the drop") {
  pstrain::RunConfig config = six_epochs("step");
  config.schedule.step_epochs = {2, 4};
  config.schedule.gamma = 0.1;
  config.schedule.warmup_epochs = 1;
  const std::vector<Taken> clean = run(config, -1);
  const std::vector<Taken> dropped = run(config, 1);  // epochs 1..5 have 30 steps
  REQUIRE(clean.size() == 120);
  REQUIRE(dropped.size() == 20 + 5 * 30);
  // Without a drop: exactly the step schedule of the first plan.
  const pstrain::LrSchedule plan(config.optimizer, config.schedule, 20, 120, 60);
  for (const Taken& t : clean) {
    CAPTURE(t.step);
    CHECK(t.lr == plan.lr_at(t.step));
  }
  // With the drop: every step of an epoch after the warmup has its epoch's rate.
  std::map<int, std::pair<double, double>> range;  // epoch -> lowest, highest lr
  for (const Taken& t : dropped) {
    auto [it, fresh] = range.try_emplace(t.epoch, t.lr, t.lr);
    if (!fresh) it->second = {std::min(it->second.first, t.lr), std::max(it->second.second, t.lr)};
  }
  const double expected[] = {0.1, 0.1, 0.01, 0.01, 0.001, 0.001};
  for (int epoch = 1; epoch < 6; ++epoch) {
    CAPTURE(epoch);
    CHECK(range[epoch].first == doctest::Approx(expected[epoch]));
    CHECK(range[epoch].second == doctest::Approx(expected[epoch]));
  }
  // Epoch 0 (before the drop) warms up exactly as without it.
  for (int i = 0; i < 20; ++i) CHECK(dropped[static_cast<std::size_t>(i)].lr == clean[static_cast<std::size_t>(i)].lr);
}

TEST_CASE("cosine after a re-plan: it reaches min_lr at the end of the last epoch, not before") {
  pstrain::RunConfig config = six_epochs("cosine");
  config.schedule.min_lr = 0.001;
  const std::vector<Taken> dropped = run(config, 2);  // 40 steps, then 4 epochs of 30
  REQUIRE(dropped.size() == 40 + 4 * 30);
  const pstrain::LrSchedule plan(config.optimizer, config.schedule, 20, 120, 60);
  // The first step of each epoch has the first plan's rate at that epoch's start.
  for (const Taken& t : dropped) {
    CAPTURE(t.step);
    const std::int64_t epoch_start = t.epoch < 2 ? t.epoch * 20 : 40 + (t.epoch - 2) * 30;
    if (t.step == epoch_start) CHECK(t.lr == doctest::Approx(plan.lr_at(t.epoch * 20)));
  }
  // Still decreasing through the last epoch: the last step is above min_lr, close to it.
  CHECK(dropped.back().lr > config.schedule.min_lr);
  CHECK(dropped.back().lr < 0.002);
  CHECK(dropped[dropped.size() - 2].lr > dropped.back().lr);
}
