// A worker's side of a membership change (worker/train/membership_answer.h):
// the answer it gives (EpochDriver::next_step, the next step it runs) and
// the decision it reads.
#include <doctest/doctest.h>

#include <fstream>
#include <vector>

#include "common/base/errors.h"
#include "common/base/log.h"
#include "common/config/config.h"
#include "worker/data/synthetic.h"
#include "worker/train/epoch_driver.h"
#include "worker/train/membership_answer.h"
#include "worker/train/metrics.h"
#include "tests/support/temp_dir.h"

using namespace pstrain;

TEST_CASE("the decision is '<epoch> <from_step> <members> [<reason>]' or 'none'; anything else is refused") {
  const auto d = parse_decision("1 4 0,2");
  REQUIRE(d);
  CHECK(d->epoch == 1);
  CHECK(d->from_step == 4);
  CHECK(d->members == std::vector<int>{0, 2});
  CHECK(d->reason.empty());
  const auto grow = parse_decision("1 4 0,1,2 ctl");
  REQUIRE(grow);
  CHECK(grow->members == std::vector<int>{0, 1, 2});
  CHECK(grow->reason == "ctl");
  CHECK_FALSE(parse_decision("none"));
  for (const char* bad : {"", "1 4", "1 0 0,1", "1 4 1,0", "x 4 0", "1 4 0 ctl extra", "1 4 0 Ctl", "1 4 0 c-1"}) {
    CAPTURE(bad);
    CHECK_THROWS_AS(parse_decision(bad), ProtocolError);
  }
}

TEST_CASE("while a step runs, next_step is the step after it within its epoch, the next epoch's 0, or the end") {
  RunConfig config;
  config.mode = Mode::kSync;
  config.cluster.num_workers = 2;
  config.workload.batch_size = 10;
  config.workload.epochs = 2;
  const data::Dataset train = data::make_synthetic(60, 1);  // 30 samples per worker: 3 steps per epoch
  EpochDriver driver(config, train, 0, 2);
  Logger log("test", LogLevel::kWarn);
  MetricsWriter metrics("", "worker-0.jsonl");
  const std::int64_t images = 0;
  std::vector<std::string> answers, after;
  driver.run(
      log, metrics, images,
      [&](std::span<const std::int64_t>, std::int64_t, int, double) {
        answers.push_back(format_answer(driver.next_step()));
        after.push_back(format_answer(driver.step_after_next()));
        return 0.0;
      },
      [](std::int64_t, int, bool) {});
  CHECK(answers == std::vector<std::string>{"0 1 1", "0 2 2", "1 0 3", "1 1 4", "1 2 5", "end"});
  // The step after the next (where a worker answering one step ahead waits): the next epoch's step 1 after its 0.
  CHECK(after == std::vector<std::string>{"0 2 2", "1 0 3", "1 1 4", "1 2 5", "end", "end"});
}

TEST_CASE("a worker that reaches an epoch after a change within it was announced records the change's step too") {
  RunConfig config;
  config.mode = Mode::kAsync;
  config.cluster.num_workers = 3;
  config.cluster.min_workers = 2;
  config.workload.batch_size = 10;
  config.workload.epochs = 2;
  const data::Dataset train = data::make_synthetic(90, 1);  // 30 samples per worker: 3 steps per epoch
  EpochDriver driver(config, train, 0, 3);
  Logger log("test", LogLevel::kWarn);
  pstrain::test::TempDir dir;
  MetricsWriter metrics(dir.path().string(), "worker-0.jsonl");
  const std::int64_t images = 0;
  EpochMembers members([](int) { return std::vector<int>{0, 1, 2}; });
  driver.run(
      log, metrics, images,
      [&](std::span<const std::int64_t>, std::int64_t step, int, double) {
        if (step == 0) members.add_segment(1, 1, {0, 1});  // decided while this worker was in epoch 0
        return 0.0;
      },
      [](std::int64_t, int, bool) {}, 0, &members);
  std::ifstream in(dir.path() / "metrics" / "worker-0.jsonl");
  std::vector<std::string> plans;
  for (std::string line; std::getline(in, line);) {
    if (line.find("\"type\":\"plan\"") != std::string::npos) plans.push_back(line);
  }
  REQUIRE(plans.size() == 3);  // the run's, epoch 1's start (3 workers), the change (2 from its step 1)
  CHECK(plans[1].find("\"workers\":3") != std::string::npos);
  CHECK(plans[2].find("\"workers\":2") != std::string::npos);
  CHECK(plans[2].find("\"step\":4") != std::string::npos);  // epoch 1 begins at step 3
}
