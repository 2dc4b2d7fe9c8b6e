// ssp with real processes: the tiny sync config switched to mode "ssp" with a
// 4x straggler. The fast worker must be held within the bound (clock gap) and
// so spend time with its pulls parked at the servers (blocked time).
#include <doctest/doctest.h>

#include "tests/integration/launch_test_util.h"
#include "tests/integration/summary_checks.h"
#include "tools/report/json_value.h"

namespace {

using pstrain::report::JsonValue;

JsonValue run_ssp(const it::TempDir& dir, int bound) {
  const auto run = dir.path() / ("ssp-" + std::to_string(bound));
  auto args = it::launch_args(it::kSourceDir / "configs/tiny_sync.toml", run);
  args.insert(args.end(), {"--set", "mode=\"ssp\"", "--set", "ps.staleness_bound=" + std::to_string(bound),
                           "--set", "workload.straggler_rank=1", "--set", "workload.straggler_slowdown=4",
                           "--set", "workload.epochs=6", "--quiet"});  // 6 epochs: the bound's blocking outweighs start-up waits under load
  const std::vector<std::string> rate = it::tiny_async_rate("ssp");
  args.insert(args.end(), rate.begin(), rate.end());
  const it::Result r = it::run_launch(args, dir.path());
  INFO(r.output);
  REQUIRE_FALSE(r.exit.signaled);
  REQUIRE(r.exit.code == 0);
  return pstrain::report::parse_json(it::read_file(run / "summary.json"), "summary.json");
}

}  // namespace

TEST_CASE("ssp with a 4x straggler runs through the launcher, within its bound, and blocks the fast worker") {
  it::TempDir dir;
  for (const int bound : {0, 2}) {
    CAPTURE(bound);
    const JsonValue summary = run_ssp(dir, bound);
    CHECK(summary.find("mode")->as_string("mode") == "ssp");
    const JsonValue& ssp = *summary.find("ssp");
    REQUIRE(ssp.kind() == JsonValue::Kind::kObject);
    CHECK(ssp.find("staleness_bound")->as_number("staleness_bound") == bound);
    const double gap = ssp.find("clock_gap_max")->as_number("clock_gap_max");
    CHECK(gap <= bound);
    CHECK(ssp.find("blocked_s_mean")->as_number("blocked_s_mean") > 0.0);
    // The fast worker (rank 0) waits for the straggler, not the other way round.
    const auto& workers = summary.find("per_worker")->items();
    REQUIRE(workers.size() == 2);
    CHECK(workers[0].find("blocked_s")->as_number("blocked_s") > workers[1].find("blocked_s")->as_number("blocked_s"));
    // Pushes are applied as they arrive: staleness is recorded, as in async.
    it::check_staleness(*summary.find("staleness"));
    CHECK(summary.find("final_test_accuracy")->as_number("final_test_accuracy") > 0.1);
  }
}
