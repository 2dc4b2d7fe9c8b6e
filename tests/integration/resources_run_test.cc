// Resource sampling in real runs: every process of a launched job writes
// metrics/resources-<role>-<rank>.csv with plausible values, the summary has
// their means and peaks, and output.resource_interval_ms = 0 writes none.
#include <doctest/doctest.h>

#include <sstream>

#include "common/observe/resource_sampler.h"
#include "tests/integration/launch_test_util.h"
#include "tools/report/json_value.h"
#include "tools/report/resources.h"

namespace {

using pstrain::report::JsonValue;

// Checks one process's CSV; returns its series.
pstrain::report::ResourceSeries check_csv(const it::fs::path& run, const std::string& role, int rank,
                                          bool expect_traffic, bool expect_collective) {
  const it::fs::path file = run / "metrics" / ("resources-" + role + "-" + std::to_string(rank) + ".csv");
  CAPTURE(file);
  REQUIRE(it::fs::exists(file));
  std::istringstream text(it::read_file(file));
  std::string header;
  std::getline(text, header);
  CHECK(header == pstrain::kResourceCsvHeader);
  const auto series = pstrain::report::read_resource_csv(file, role, rank);
  REQUIRE(!series.samples.empty());
  double last_time = -1, last_user = 0, last_system = 0, last_sent = 0, last_received = 0;
  for (std::size_t i = 0; i < series.samples.size(); ++i) {
    CAPTURE(i);
    const auto& s = series.samples[i];
    CHECK(s.time_s > last_time);
    CHECK(s.time_s >= 0);  // the job clock starts before any process
    CHECK(s.time_s < 300);
    CHECK(s.cpu_user_s >= last_user);
    CHECK(s.cpu_system_s >= last_system);
    REQUIRE(s.rss_bytes.has_value());
    CHECK(*s.rss_bytes > 1e6);
    if (s.cpu_percent) {  // empty only for a last row too close to the one before
      CHECK(*s.cpu_percent >= 0);
      CHECK(*s.cpu_percent < 100.0 * 64);
    } else {
      CHECK(i + 1 == series.samples.size());
    }
    REQUIRE(s.bytes_sent.has_value());
    REQUIRE(s.bytes_received.has_value());
    CHECK(*s.bytes_sent >= last_sent);
    CHECK(*s.bytes_received >= last_received);
    CHECK(s.collective_bytes.has_value() == expect_collective);
    CHECK_FALSE(s.gpu_util_percent.has_value());  // CPU runs
    last_time = s.time_s, last_user = s.cpu_user_s, last_system = s.cpu_system_s;
    last_sent = *s.bytes_sent, last_received = *s.bytes_received;
  }
  if (expect_traffic) {
    CHECK(last_sent > 0);
    CHECK(last_received > 0);
  }
  return series;
}

}  // namespace

TEST_CASE("a tiny sync run samples every process's resources and summarizes them") {
  it::TempDir dir;
  const auto run = dir.path() / "sync";
  auto args = it::launch_args(it::kSourceDir / "configs/tiny_sync.toml", run);
  args.insert(args.end(), {"--set", "output.resource_interval_ms=50", "--quiet"});
  const it::Result r = it::run_launch(args, dir.path());
  INFO(r.output);
  REQUIRE(r.exit.code == 0);

  check_csv(run, "scheduler", 0, true, false);
  double server_received = 0;
  for (int s = 0; s < 2; ++s) server_received += *check_csv(run, "server", s, true, false).samples.back().bytes_received;
  double worker_sent = 0;
  for (int w = 0; w < 2; ++w) {
    const auto series = check_csv(run, "worker", w, true, false);
    CHECK(series.samples.size() >= 3);  // a run of about a second at 50 ms
    worker_sent += *series.samples.back().bytes_sent;
  }
  // The workers push gradients of the model to the servers every step: many
  // times its size. The servers receive what the workers sent them, and
  // workers also talk to the scheduler.
  CHECK(worker_sent > 1e5);
  CHECK(server_received > 0.5 * worker_sent);
  CHECK(server_received < 1.1 * worker_sent);

  const JsonValue summary = pstrain::report::parse_json(it::read_file(run / "summary.json"), "summary.json");
  const auto& resources = summary.find("resources")->items();
  REQUIRE(resources.size() == 5);
  const std::vector<std::pair<std::string, std::int64_t>> order{
      {"scheduler", 0}, {"server", 0}, {"server", 1}, {"worker", 0}, {"worker", 1}};
  for (std::size_t i = 0; i < resources.size(); ++i) {
    CAPTURE(i);
    const JsonValue& p = resources[i];
    CHECK(p.find("role")->as_string("role") == order[i].first);
    CHECK(p.find("rank")->as_integer("rank") == order[i].second);
    CHECK(p.find("cpu_percent_mean")->as_number("mean") >= 0);
    if (order[i].first == "worker") CHECK(p.find("cpu_percent_mean")->as_number("mean") > 0);  // it trained
    CHECK(p.find("cpu_percent_peak")->as_number("peak") >= p.find("cpu_percent_mean")->as_number("mean") - 1e-6);
    CHECK(p.find("rss_peak_bytes")->as_integer("rss") > 1000000);
    CHECK(p.find("bytes_sent")->as_integer("sent") > 0);
    CHECK(p.find("bytes_received")->as_integer("received") > 0);
    CHECK(p.find("gpu")->is_null());
  }
  CHECK(summary.find("warnings")->items().empty());
  const std::string md = it::read_file(run / "summary.md");
  CHECK(it::contains(md, "## Resource use"));
  CHECK(it::contains(md, "| worker 1 | "));
}

TEST_CASE("allreduce workers count the bytes they allreduce") {
  it::TempDir dir;
  const auto run = dir.path() / "allreduce";
  auto args = it::launch_args(it::kSourceDir / "configs/tiny_allreduce.toml", run);
  args.insert(args.end(), {"--set", "output.resource_interval_ms=50", "--quiet"});
  const it::Result r = it::run_launch(args, dir.path());
  INFO(r.output);
  REQUIRE(r.exit.code == 0);
  check_csv(run, "scheduler", 0, true, false);
  for (int w = 0; w < 2; ++w) {
    const auto series = check_csv(run, "worker", w, true, true);
    CHECK(*series.samples.back().collective_bytes > 1e5);
  }
  CHECK_FALSE(it::fs::exists(run / "metrics" / "resources-server-0.csv"));
}

TEST_CASE("output.resource_interval_ms = 0 writes no resources CSV") {
  it::TempDir dir;
  const auto run = dir.path() / "off";
  auto args = it::launch_args(it::kSourceDir / "configs/tiny_sync.toml", run);
  args.insert(args.end(), {"--set", "output.resource_interval_ms=0", "--set", "workload.epochs=1", "--quiet"});
  const it::Result r = it::run_launch(args, dir.path());
  INFO(r.output);
  REQUIRE(r.exit.code == 0);
  for (const auto& entry : it::fs::directory_iterator(run / "metrics")) {
    CAPTURE(entry.path());
    CHECK(entry.path().filename().string().rfind("resources-", 0) != 0);
  }
  const JsonValue summary = pstrain::report::parse_json(it::read_file(run / "summary.json"), "summary.json");
  CHECK(summary.find("resources")->items().empty());
  CHECK_FALSE(it::contains(it::read_file(run / "summary.md"), "Resource use"));
}
