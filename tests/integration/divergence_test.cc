// Divergence is a training outcome, not a crash: with a huge learning rate
// every mode ends with one line naming the worker, step and rate, the
// launcher's own exit code for it, and no weights.bin with non-finite values.
#include <doctest/doctest.h>

#include "tests/integration/launch_test_util.h"

TEST_CASE("a forced divergence ends the job with the one clear line and exit code 4, in every mode") {
  for (const char* mode : {"sync", "async", "allreduce"}) {
    CAPTURE(mode);
    it::TempDir dir;
    const auto run = dir.path() / "run";
    const std::string config = std::string(mode) == "allreduce" ? "configs/tiny_allreduce.toml" : "configs/tiny_sync.toml";
    auto args = it::launch_args(it::kSourceDir / config, run);
    args.insert(args.end(), {"--set", std::string("mode=") + mode, "--set", "optimizer.lr=1e20", "--set",
                             "output.trace=off", "--quiet"});
    if (std::string(mode) == "allreduce") args.insert(args.end(), {"--set", "cluster.servers=0"});
    const it::Result r = it::run_launch(args, dir.path());
    INFO(r.output);
    CHECK_FALSE(r.exit.signaled);
    CHECK(r.exit.code == 4);
    // The headline: the worker's line, right after the launcher's start lines.
    const auto headline = r.output.find(" launch] worker ");
    REQUIRE(headline != std::string::npos);
    const std::string line = r.output.substr(headline, r.output.find('\n', headline) - headline);
    CHECK(it::contains(line, ": training diverged at step "));
    CHECK(it::contains(line, "lr 1e+20): lower optimizer.lr"));
    CHECK(it::contains(line, ", or set workload.on_nonfinite = \"skip\""));
    CHECK(it::contains(r.output, "exited with code 4 (training diverged)"));
    CHECK_FALSE(it::fs::exists(run / "weights.bin"));
    // Only a partial summary (what ran until the failure), saying why it ended.
    const std::string summary = it::read_file(run / "summary.json");
    CHECK(it::contains(summary, "\"partial\": true"));
    CHECK(it::contains(summary, "(training diverged)"));
  }
}
