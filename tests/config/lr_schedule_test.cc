// LrSchedule shapes: warmup endpoints, step boundaries, cosine endpoints and
// midpoint, linear scaling, and its input checks.
#include "common/math/lr_schedule.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <numbers>

#include "common/config/config.h"
#include "common/base/errors.h"

namespace pstrain {
namespace {

OptimizerConfig lr_of(double lr) {
  OptimizerConfig c;
  c.lr = lr;
  return c;
}

ScheduleConfig decay(const char* name) {
  ScheduleConfig s;
  s.decay = name;
  return s;
}

TEST_CASE("no warmup, no decay: constant") {
  const LrSchedule s(lr_of(0.1), decay("none"), 10, 100, 64);
  CHECK(s.lr_at(0) == 0.1);
  CHECK(s.lr_at(99) == 0.1);
  CHECK(s.lr_at(1000) == 0.1);
  CHECK(s.warmup_steps() == 0);
}

TEST_CASE("linear warmup: lr * (step + 1) / W, then the base lr") {
  ScheduleConfig sc = decay("none");
  sc.warmup_epochs = 2;
  const LrSchedule s(lr_of(0.1), sc, 10, 100, 64);
  CHECK(s.warmup_steps() == 20);
  CHECK(s.lr_at(0) == doctest::Approx(0.005));
  CHECK(s.lr_at(9) == doctest::Approx(0.05));
  CHECK(s.lr_at(19) == doctest::Approx(0.1));
  CHECK(s.lr_at(20) == doctest::Approx(0.1));
  sc.warmup_epochs = 0.25;  // 2.5 steps round to 3
  CHECK(LrSchedule(lr_of(0.3), sc, 10, 100, 64).warmup_steps() == 3);
  CHECK(LrSchedule(lr_of(0.3), sc, 10, 100, 64).lr_at(0) == doctest::Approx(0.1));
}

TEST_CASE("step decay multiplies by gamma at each boundary") {
  ScheduleConfig sc = decay("step");
  sc.step_epochs = {1, 2.5, 3};
  sc.gamma = 0.1;
  const LrSchedule s(lr_of(0.1), sc, 10, 100, 64);
  CHECK(s.decay_steps() == std::vector<std::int64_t>{10, 25, 30});
  CHECK(s.lr_at(9) == doctest::Approx(0.1));
  CHECK(s.lr_at(10) == doctest::Approx(0.01));
  CHECK(s.lr_at(24) == doctest::Approx(0.01));
  CHECK(s.lr_at(25) == doctest::Approx(0.001));
  CHECK(s.lr_at(30) == doctest::Approx(0.0001));
  CHECK(s.lr_at(99) == doctest::Approx(0.0001));
}

TEST_CASE("cosine decay goes from base to min_lr over the steps after warmup") {
  ScheduleConfig sc = decay("cosine");
  sc.min_lr = 0.01;
  const LrSchedule s(lr_of(0.1), sc, 10, 100, 64);
  CHECK(s.lr_at(0) == doctest::Approx(0.1));
  CHECK(s.lr_at(50) == doctest::Approx(0.055));
  CHECK(s.lr_at(25) == doctest::Approx(0.01 + 0.09 * 0.5 * (1 + std::cos(std::numbers::pi / 4))));
  CHECK(s.lr_at(100) == doctest::Approx(0.01));
  CHECK(s.lr_at(500) == doctest::Approx(0.01));
  CHECK(s.lr_at(99) > 0.01);

  sc.warmup_epochs = 1;  // W = 10: warm up to base, then cosine over 100 steps
  const LrSchedule w(lr_of(0.1), sc, 10, 110, 64);
  CHECK(w.lr_at(0) == doctest::Approx(0.01));
  CHECK(w.lr_at(9) == doctest::Approx(0.1));
  CHECK(w.lr_at(10) == doctest::Approx(0.1));
  CHECK(w.lr_at(60) == doctest::Approx(0.055));
  CHECK(w.lr_at(110) == doctest::Approx(0.01));
}

TEST_CASE("linear scaling multiplies the base lr by global_batch / base_batch") {
  ScheduleConfig sc = decay("none");
  sc.linear_scaling = true;
  sc.base_batch = 256;
  sc.warmup_epochs = 1;
  const LrSchedule s(lr_of(0.1), sc, 10, 100, 1024);
  CHECK(s.base_lr() == doctest::Approx(0.4));
  CHECK(s.lr_at(0) == doctest::Approx(0.04));
  CHECK(s.lr_at(9) == doctest::Approx(0.4));
  sc.linear_scaling = false;
  CHECK(LrSchedule(lr_of(0.1), sc, 10, 100, 1024).base_lr() == 0.1);
}

TEST_CASE("schedule_max_lr: no step of any plan or decay exceeds it; it is the base lr, linear scaling included") {
  for (const char* name : {"none", "step", "cosine"}) {
    CAPTURE(name);
    ScheduleConfig sc = decay(name);
    sc.warmup_epochs = 1.5;
    sc.step_epochs = {2.0, 4.0};
    sc.min_lr = 0.001;
    for (const bool scaling : {false, true}) {
      sc.linear_scaling = scaling;
      const double bound = schedule_max_lr(lr_of(0.1), sc, 512);
      CHECK(bound == (scaling ? 0.1 * 512.0 / 256.0 : 0.1));
      const LrSchedule s(lr_of(0.1), sc, 10, 60, 512);
      CHECK(s.base_lr() == bound);
      double highest = 0.0;
      for (std::int64_t step = 0; step < 80; ++step) highest = std::max(highest, s.lr_at(step));
      for (const std::int64_t per_epoch : {10, 13, 20}) {  // re-plans after drops
        for (int epoch = 0; epoch < 6; ++epoch) {
          for (std::int64_t b = 0; b < per_epoch; ++b) highest = std::max(highest, s.lr_in_epoch(epoch, b, per_epoch));
        }
      }
      // Within rounding (the servers allow kLrTolerance, 1e-6), and reached: the bound is not loose.
      CHECK(highest <= bound * (1 + 1e-12));
      CHECK(highest >= bound * (1 - 1e-12));
    }
  }
  CHECK_THROWS_AS(schedule_max_lr(lr_of(-1.0), decay("none"), 64), ConfigError);
  CHECK_THROWS_AS(schedule_max_lr(lr_of(0.1), decay("none"), 0), ConfigError);
}

TEST_CASE("invalid inputs are ConfigErrors naming the value") {
  const ScheduleConfig ok = decay("cosine");
  auto with = [&ok](auto edit) {
    ScheduleConfig s = ok;
    edit(s);
    return s;
  };
  CHECK_THROWS_WITH_AS(LrSchedule(lr_of(0.1), ok, 0, 100, 64),
                       "lr schedule: steps_per_epoch: expected an integer >= 1, got 0", ConfigError);
  CHECK_THROWS_WITH_AS(LrSchedule(lr_of(0.1), ok, 10, 0, 64),
                       "lr schedule: total_steps: expected an integer >= 1, got 0", ConfigError);
  CHECK_THROWS_WITH_AS(LrSchedule(lr_of(0.1), ok, 10, 100, 0),
                       "lr schedule: global_batch: expected an integer >= 1, got 0", ConfigError);
  CHECK_THROWS_WITH_AS(LrSchedule(lr_of(0), ok, 10, 100, 64),
                       "lr schedule: optimizer.lr: expected a finite number > 0, got 0", ConfigError);
  CHECK_THROWS_WITH_AS(
      LrSchedule(lr_of(0.1), with([](auto& s) { s.decay = "linear"; }), 10, 100, 64),
      "lr schedule: schedule.decay: expected one of \"none\", \"step\", \"cosine\", got \"linear\"",
      ConfigError);
  CHECK_THROWS_WITH_AS(LrSchedule(lr_of(0.1), with([](auto& s) { s.warmup_epochs = -1; }), 10, 100, 64),
                       "lr schedule: schedule.warmup_epochs: expected a finite number >= 0, got -1",
                       ConfigError);
  CHECK_THROWS_WITH_AS(
      LrSchedule(lr_of(0.1), with([](auto& s) {
                   s.step_epochs = {2, 1};
                 }),
                 10, 100, 64),
      "lr schedule: schedule.step_epochs: expected finite numbers > 0 in increasing order, got 1 "
      "after 2",
      ConfigError);
  CHECK_THROWS_WITH_AS(LrSchedule(lr_of(0.1), with([](auto& s) { s.gamma = 0; }), 10, 100, 64),
                       "lr schedule: schedule.gamma: expected a number in (0, 1], got 0", ConfigError);
  CHECK_THROWS_WITH_AS(LrSchedule(lr_of(0.1), with([](auto& s) { s.gamma = 1.5; }), 10, 100, 64),
                       "lr schedule: schedule.gamma: expected a number in (0, 1], got 1.5", ConfigError);
  CHECK_THROWS_WITH_AS(LrSchedule(lr_of(0.1), with([](auto& s) { s.min_lr = -1; }), 10, 100, 64),
                       "lr schedule: schedule.min_lr: expected a finite number >= 0, got -1", ConfigError);
  CHECK_THROWS_WITH_AS(LrSchedule(lr_of(0.1), with([](auto& s) { s.min_lr = 0.2; }), 10, 100, 64),
                       "lr schedule: schedule.min_lr: expected at most the base lr (0.1), got 0.2",
                       ConfigError);
  CHECK_THROWS_WITH_AS(LrSchedule(lr_of(0.1), with([](auto& s) { s.base_batch = 0; }), 10, 100, 64),
                       "lr schedule: schedule.base_batch: expected an integer >= 1, got 0", ConfigError);
  const LrSchedule s(lr_of(0.1), ok, 10, 100, 64);
  CHECK_THROWS_WITH_AS(s.lr_at(-1), "lr schedule: step: expected an integer >= 0, got -1", ConfigError);
}

TEST_CASE("lr_in_epoch: the first plan gives lr_at exactly; another plan the same fraction of training") {
  ScheduleConfig sc = decay("step");
  sc.step_epochs = {3, 6};
  sc.gamma = 0.1;
  sc.warmup_epochs = 1;
  const LrSchedule s(lr_of(0.1), sc, 10, 100, 64);
  CHECK(s.steps_per_epoch() == 10);
  for (std::int64_t step = 0; step < 100; ++step) {
    CAPTURE(step);
    CHECK(s.lr_in_epoch(static_cast<int>(step / 10), step % 10, 10) == s.lr_at(step));  // bit for bit
  }
  // 15 steps an epoch after a re-plan: the decays at the starts of epochs 3 and 6, not at steps 30 and 60.
  CHECK(s.lr_in_epoch(2, 14, 15) == doctest::Approx(0.1));
  CHECK(s.lr_in_epoch(3, 0, 15) == doctest::Approx(0.01));
  CHECK(s.lr_in_epoch(5, 14, 15) == doctest::Approx(0.01));
  CHECK(s.lr_in_epoch(6, 0, 15) == doctest::Approx(0.001));
  // Warmup over epoch 0 in 15 steps: rising, never above the base, the base at its end.
  double previous = 0;
  for (int b = 0; b < 15; ++b) {
    const double lr = s.lr_in_epoch(0, b, 15);
    CHECK(lr > previous);
    CHECK(lr <= 0.1);
    previous = lr;
  }
  CHECK(previous == doctest::Approx(0.1));
  // Fewer steps an epoch (a rejoin): 5 steps, the boundary still at epoch 3.
  CHECK(s.lr_in_epoch(2, 4, 5) == doctest::Approx(0.1));
  CHECK(s.lr_in_epoch(3, 0, 5) == doctest::Approx(0.01));
}

TEST_CASE("lr_in_epoch: cosine ends at min_lr with the last epoch of any plan; bad positions are ConfigErrors") {
  ScheduleConfig sc = decay("cosine");
  sc.min_lr = 0.01;
  const LrSchedule s(lr_of(0.1), sc, 10, 100, 64);
  CHECK(s.lr_in_epoch(5, 0, 15) == doctest::Approx(s.lr_at(50)));
  CHECK(s.lr_in_epoch(5, 0, 15) == doctest::Approx(0.055));
  CHECK(s.lr_in_epoch(9, 14, 15) > 0.01);
  CHECK(s.lr_in_epoch(9, 14, 15) < s.lr_in_epoch(9, 13, 15));
  CHECK(s.lr_in_epoch(10, 0, 15) == doctest::Approx(0.01));
  CHECK_THROWS_AS(s.lr_in_epoch(-1, 0, 10), ConfigError);
  CHECK_THROWS_AS(s.lr_in_epoch(0, -1, 10), ConfigError);
  CHECK_THROWS_WITH_AS(s.lr_in_epoch(0, 0, 0), "lr schedule: steps_this_epoch: expected an integer >= 1, got 0",
                       ConfigError);
}

}  // namespace
}  // namespace pstrain

TEST_CASE("schedule_max_lr of an elastic job: the global batch of cluster.max_workers (sync), one push's (async)") {
  pstrain::RunConfig config;
  config.mode = pstrain::Mode::kSync;
  config.cluster.num_workers = 2;
  config.cluster.max_workers = 4;
  config.workload.batch_size = 32;
  config.optimizer.lr = 0.1;
  config.schedule.linear_scaling = true;
  config.schedule.base_batch = 64;
  CHECK(pstrain::schedule_max_lr(config) == doctest::Approx(0.1 * 4 * 32 / 64));
  config.cluster.max_workers = 0;  // not elastic: cluster.workers
  CHECK(pstrain::schedule_max_lr(config) == doctest::Approx(0.1 * 2 * 32 / 64));
  config.cluster.max_workers = 4;
  config.mode = pstrain::Mode::kAsync;
  CHECK(pstrain::schedule_max_lr(config) == doctest::Approx(0.1 * 32 / 64));
}
