// The numbers a user reads after a worker restart, with real processes
// (issue: the restarted process wrote time_s on another clock and its end
// record counted only its own images, so the summary's wall time was off and
// its throughput a third too low). Now: the rank's records stay on one time
// axis across its processes, the summary counts every process's images, marks
// the rank "restarted", and its wall time agrees with the worker never killed.
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>

#include "tests/integration/launch_test_util.h"
#include "tools/report/json_value.h"

namespace {

using namespace std::chrono_literals;
using pstrain::report::JsonValue;
using pstrain::report::parse_json;

struct RankRecords {
  std::int64_t step_images = 0;        // the batches of its step records
  int steps = 0;
  std::vector<double> origins;         // job_s - time_s of each record that has both
  bool rejoined = false;
};

RankRecords read_records(const it::fs::path& file) {
  RankRecords r;
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const JsonValue record = parse_json(line, file.string());
    const std::string& type = record.find("type")->as_string("type");
    r.rejoined = r.rejoined || type == "rejoin";
    if (type == "step") {
      r.step_images += record.find("batch")->as_integer("batch");
      ++r.steps;
    }
    const JsonValue* time_s = record.find("time_s");
    const JsonValue* job_s = record.find("job_s");
    if (time_s != nullptr && job_s != nullptr) r.origins.push_back(job_s->as_number("job_s") - time_s->as_number("time_s"));
  }
  return r;
}

int step_count(const it::fs::path& file) {
  const std::string text = it::read_file(file);
  int n = 0;
  for (auto at = text.find("\"type\":\"step\""); at != std::string::npos; at = text.find("\"type\":\"step\"", at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("restart: the summary counts every process of a restarted rank, on one time axis") {
  it::TempDir dir;
  const auto run = dir.path() / "run";
  auto args = it::launch_args(it::kSourceDir / "configs" / "tiny_sync.toml", run);
  for (const char* s : {"cluster.on_worker_failure=restart", "cluster.heartbeat_timeout_ms=1500",
                        "cluster.timeout_ms=30000", "workload.epochs=6", "workload.straggler_rank=0",
                        "workload.straggler_slowdown=3", "output.trace=off"}) {
    args.insert(args.end(), {"--set", s});
  }
  args.push_back("--quiet");
  it::LaunchProcess p(args, dir.path() / "out.txt");
  const auto victim_file = run / "metrics/worker-1.jsonl";
  const bool training =
      it::wait_until([&] { return step_count(victim_file) >= 4; }, 180s, "worker 1's fourth step record");
  INFO(p.output());
  REQUIRE(training);
  REQUIRE(kill(it::read_pids(run).at("worker-1"), SIGKILL) == 0);
  const auto exit = p.wait(240s);
  INFO(p.output());
  REQUIRE(exit.has_value());
  REQUIRE(exit->code == 0);

  const RankRecords victim = read_records(victim_file);
  const RankRecords survivor = read_records(run / "metrics/worker-0.jsonl");
  REQUIRE(victim.rejoined);
  REQUIRE(victim.origins.size() >= 2);
  // One axis: every record's job_s - time_s is the same, before and after the rejoin (each pair
  // is written at one moment; a process on its own axis would shift it by its start-up time).
  const auto [lo, hi] = std::minmax_element(victim.origins.begin(), victim.origins.end());
  it::note("restarted rank's axis origin on the job clock: " + std::to_string(*lo) + " .. " + std::to_string(*hi) + " s");
  CHECK(*hi - *lo < 0.02);

  const JsonValue summary = parse_json(it::read_file(run / "summary.json"), "summary.json");
  const auto& workers = summary.find("per_worker")->items();
  REQUIRE(workers.size() == 2);
  const JsonValue& w0 = workers.at(0);
  const JsonValue& w1 = workers.at(1);
  CHECK(w1.find("status")->as_string("status") == "restarted");
  CHECK(w0.find("status")->as_string("status") == "done");
  // The images a rank's step records hold, every process counted.
  CHECK(w1.find("images")->as_integer("images") == victim.step_images);
  CHECK(w0.find("images")->as_integer("images") == survivor.step_images);
  // In sync both ranks end together: the restarted rank's training time is the survivor's, up to
  // the difference of the two processes' start-up (their axes start when each began training).
  const double t0 = w0.find("time_s")->as_number("t0");
  const double t1 = w1.find("time_s")->as_number("t1");
  it::note("training time: worker 0 " + std::to_string(t0) + " s, restarted worker 1 " + std::to_string(t1) + " s");
  CHECK(std::fabs(t1 - t0) < 0.5 + 0.1 * t0);
  const double wall = summary.find("wall_time_s")->as_number("wall");
  const double images = static_cast<double>(victim.step_images + survivor.step_images);
  CHECK(summary.find("global_images_per_s")->as_number("g") == doctest::Approx(images / wall).epsilon(1e-6));
}
