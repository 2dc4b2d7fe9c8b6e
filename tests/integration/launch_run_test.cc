// Real runs: `launch` starts pstrain-scheduler, -server and -worker as
// processes talking TCP over loopback (ephemeral ports) on the tiny configs.
#include <doctest/doctest.h>

#include <numeric>

#include "common/config/config.h"
#include "tests/integration/launch_test_util.h"
#include "tests/integration/summary_checks.h"
#include "tools/report/json_value.h"
#include "tools/report/metrics.h"

namespace {

using pstrain::report::JsonValue;

double mean_loss(const std::vector<pstrain::report::StepRecord>& steps, std::size_t begin, std::size_t end) {
  double sum = 0;
  for (std::size_t i = begin; i < end; ++i) sum += steps[i].loss;
  return sum / static_cast<double>(end - begin);
}

// Everything docs/run_directory.md promises after a successful run.
// `echoed`: whether the launch echoed the nodes' lines (not --quiet).
void check_run_dir(const it::fs::path& run, const std::string& mode, const std::string& output, bool echoed) {
  const pstrain::RunConfig config = pstrain::load_config((run / "config.toml").string());
  CHECK(config.output.run_dir == run.string());
  CHECK(pstrain::to_string(config.mode) == mode);
  CHECK(config.workload.seed == 7);  // from --set
  for (const char* log : {"scheduler", "server-0", "server-1", "worker-0", "worker-1"}) {
    CAPTURE(log);
    CHECK(it::count_lines(run / "logs" / (std::string(log) + ".log")) > 0);
  }
  CHECK(it::read_pids(run).size() == 5);
  CHECK(it::contains(output, " worker 1] ") == echoed);  // a worker's own line, e.g. "[   0.151 worker 1] ..."
  CHECK(it::contains(output, "Run directory: " + run.string()));
  CHECK(it::contains(output, "| worker | status | time (s) | images |"));

  for (int w = 0; w < 2; ++w) {
    CAPTURE(w);
    const auto m = pstrain::report::read_worker_metrics(pstrain::report::worker_metrics_path(run, w), w);
    REQUIRE(m.steps.size() >= 16);
    REQUIRE(m.end.has_value());
    const std::size_t k = m.steps.size() / 4;
    CHECK(mean_loss(m.steps, 0, k) > mean_loss(m.steps, m.steps.size() - k, m.steps.size()));
  }
  const JsonValue summary = pstrain::report::parse_json(it::read_file(run / "summary.json"), "summary.json");
  const double accuracy = summary.find("final_test_accuracy")->as_number("final_test_accuracy");
  CHECK(accuracy > 0.5);  // it learned: chance is 0.1 on the 10 synthetic classes
  CHECK(accuracy <= 1.0);
  CHECK(summary.find("mode")->as_string("mode") == mode);
  CHECK(summary.find("per_worker")->items().size() == 2);
  CHECK(summary.find("global_images_per_s")->as_number("global_images_per_s") > 0);
  // What the convolutions ran on (tiny configs: device "cpu"), in summary.json and each worker's start-up line.
  const JsonValue* compute = summary.find("compute");
  REQUIRE(compute != nullptr);
  REQUIRE_FALSE(compute->is_null());
  CHECK(compute->find("conv_path")->as_string("conv_path") == "onednn");
  CHECK(compute->find("precision")->as_string("precision") == "fp32");
  CHECK(compute->find("backend")->as_string("backend").starts_with("cpu (oneDNN, "));
  CHECK(it::contains(it::read_file(run / "logs/worker-1.log"), "; convolutions: onednn (oneDNN "));
  CHECK(it::contains(it::read_file(run / "summary.md"), "; convolutions onednn (oneDNN "));
}

}  // namespace

TEST_CASE("the tiny sync config runs to a summary through the launcher") {
  it::TempDir dir;
  const auto run = dir.path() / "sync";
  auto args = it::launch_args(it::kSourceDir / "configs/tiny_sync.toml", run);
  args.insert(args.end(), {"--set", "workload.seed=7"});
  const it::Result r = it::run_launch(args, dir.path());
  INFO(r.output);
  REQUIRE_FALSE(r.exit.signaled);
  REQUIRE(r.exit.code == 0);
  check_run_dir(run, "sync", r.output, true);
  const JsonValue summary = pstrain::report::parse_json(it::read_file(run / "summary.json"), "summary.json");
  CHECK(summary.find("staleness")->is_null());
}

TEST_CASE("a run cut short by max_steps records the epoch its final evaluation really ran in") {
  it::TempDir dir;
  const auto run = dir.path() / "short";
  auto args = it::launch_args(it::kSourceDir / "configs/tiny_sync.toml", run);
  // 16 steps per epoch: step 20 is in epoch 1 of the 5 the config asks for.
  args.insert(args.end(), {"--set", "workload.epochs=5", "--set", "workload.max_steps=20", "--quiet"});
  const it::Result r = it::run_launch(args, dir.path());
  INFO(r.output);
  REQUIRE(r.exit.code == 0);
  const auto m = pstrain::report::read_worker_metrics(pstrain::report::worker_metrics_path(run, 0), 0);
  REQUIRE(m.steps.size() == 20);
  CHECK(m.steps.back().epoch == 1);
  REQUIRE_FALSE(m.evals.empty());
  CHECK(m.evals.back().step == 20);
  CHECK(m.evals.back().epoch == 1);  // the config's last epoch would be 4
}

TEST_CASE("the tiny async config runs to a summary with staleness through the launcher") {
  it::TempDir dir;
  const auto run = dir.path() / "async";
  auto args = it::launch_args(it::kSourceDir / "configs/tiny_async.toml", run);
  args.insert(args.end(), {"--set", "workload.seed=7", "--quiet"});
  const it::Result r = it::run_launch(args, dir.path());
  INFO(r.output);
  REQUIRE_FALSE(r.exit.signaled);
  REQUIRE(r.exit.code == 0);
  CHECK_FALSE(it::contains(r.output, " server 0] "));  // --quiet: logs only
  CHECK(it::count_lines(run / "logs/server-0.log") > 0);
  check_run_dir(run, "async", r.output, false);
  const JsonValue summary = pstrain::report::parse_json(it::read_file(run / "summary.json"), "summary.json");
  it::check_staleness(*summary.find("staleness"));
}

TEST_CASE("cluster.transport shm (the default): each worker's connection shares memory with each server; tcp does not") {
  // The default CNN's chunks (up to 1 MiB) are over the 64 KiB below which
  // bodies travel inline; the tiny model's are all under it.
  for (const char* transport : {"shm", "tcp"}) {
    CAPTURE(transport);
    it::TempDir dir;
    const auto run = dir.path() / "run";
    auto args = it::launch_args(it::kSourceDir / "configs/tiny_sync.toml", run);
    args.insert(args.end(), {"--set", "workload.model=fmnist_cnn", "--set", "workload.max_steps=3", "--set",
                             std::string("cluster.transport=") + transport});
    const it::Result r = it::run_launch(args, dir.path());
    INFO(r.output);
    REQUIRE(r.exit.code == 0);
    for (int s = 0; s < 2; ++s) {
      CAPTURE(s);
      const JsonValue m = pstrain::report::parse_json(
          it::read_file(run / "metrics" / ("server-" + std::to_string(s) + ".json")), "server metrics");
      const bool shm = std::string(transport) == "shm";
      CHECK(m.find("transport")->as_string("transport") == (shm ? "shm" : "zmq"));
      CHECK(m.find("shm_connections")->as_number("shm_connections") == (shm ? 2 : 0));
      CHECK(m.find("shm_refused")->as_number("shm_refused") == 0);
      const double through_slots = m.find("shm_bodies_sent")->as_number("shm_bodies_sent");
      // Pushes: the workers' gradients lie in arenas the servers map read-only
      // and read in place, after each arena's first push (the offer) went
      // through a slot.
      const double arenas = m.find("shm_arenas")->as_number("shm_arenas");
      const double in_place = m.find("arena_pushes_read")->as_number("arena_pushes_read");
      // Pull replies: the server's weights lie in its own arena, which the
      // workers map read-only and read in place (each connection's first
      // reply from it went the usual way with the offer).
      const double replies_in_place = m.find("arena_replies_sent")->as_number("arena_replies_sent");
      if (shm) {
        CHECK(through_slots > 0);
        CHECK(arenas == 2);
        CHECK(in_place > 0);
        CHECK(replies_in_place > 0);
      } else {
        CHECK(through_slots == 0);
        CHECK(arenas == 0);
        CHECK(in_place == 0);
        CHECK(replies_in_place == 0);
      }
    }
  }
}
