// Coverage with real processes: each worker of a launched run writes, per
// epoch, the samples it trained and their checksum ("coverage" records,
// docs/run_directory.md); in sync, async and ssp those of each epoch are
// exactly its shard of the epoch's permutation, and together every sample
// once. The summary records no membership change for a run without one.
#include <doctest/doctest.h>

#include <map>

#include "tests/integration/launch_test_util.h"
#include "tools/report/json_value.h"
#include "tools/report/metrics.h"
#include "worker/data/shard_sampler.h"
#include "worker/train/epoch_split.h"

namespace {

namespace report = pstrain::report;
using pstrain::EpochCoverage;

constexpr std::int64_t kSamples = 1024;  // configs/tiny_sync.toml: synthetic_train, seed 1, 2 workers, 2 epochs
constexpr std::uint64_t kSeed = 1;

}  // namespace

TEST_CASE("every worker's coverage records of each epoch are its shard, and all of them every sample once") {
  it::TempDir dir;
  for (const std::string mode : {"sync", "async", "ssp"}) {
    CAPTURE(mode);
    const auto run = dir.path() / mode;
    auto args = it::launch_args(it::kSourceDir / "configs/tiny_sync.toml", run);
    args.insert(args.end(), {"--set", "mode=\"" + mode + "\"", "--set", "output.trace=off", "--quiet"});
    const it::Result r = it::run_launch(args, dir.path());
    INFO(r.output);
    REQUIRE_FALSE(r.exit.signaled);
    REQUIRE(r.exit.code == 0);
    std::map<std::int64_t, EpochCoverage> epochs;
    for (const int rank : {0, 1}) {
      const report::WorkerMetrics m = report::read_worker_metrics(report::worker_metrics_path(run, rank), rank);
      REQUIRE(m.coverage.size() == 2);
      for (const report::CoverageRecord& c : m.coverage) {
        EpochCoverage shard;
        shard.add(pstrain::data::ShardSampler(kSamples, 2, rank, kSeed).indices(static_cast<int>(c.epoch)));
        CHECK(c.samples == shard.samples);
        CHECK(c.checksum == pstrain::checksum_text(shard.checksum));
        CHECK(c.first_step == c.epoch * 16);
        CHECK(c.steps == 16);
        epochs[c.epoch].add(EpochCoverage{c.samples, std::stoull(c.checksum, nullptr, 16)});
      }
    }
    EpochCoverage every;
    for (std::int64_t i = 0; i < kSamples; ++i) every.add(std::vector<std::int64_t>{i});
    CHECK(epochs.size() == 2);
    for (const auto& [epoch, sum] : epochs) CHECK(sum == every);
    const report::JsonValue summary = report::parse_json(it::read_file(run / "summary.json"), "summary.json");
    CHECK(summary.find("membership_changes")->items().empty());
  }
}
