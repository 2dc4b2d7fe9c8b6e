// Runs are never lost and late checks come first (issue 15): a config the
// nodes would refuse (unknown model, a batch larger than a worker's shard)
// stops `launch` with exit code 3 before the run directory is touched; a
// second launch finds the previous run moved aside, not deleted; a live
// launch's directory is refused; CLI traps name the fix.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdlib>
#include <algorithm>

#include "tests/integration/launch_test_util.h"
#include "tools/launcher/run_dir.h"
#include "tools/report/json_value.h"

namespace {

using namespace std::chrono_literals;

const it::fs::path kTinySync = it::kSourceDir / "configs/tiny_sync.toml";

// A finished run's directory to protect: a marker summary, as a real run leaves one.
void fake_finished_run(const it::fs::path& run) {
  it::write_file(run / "summary.json", "{\"marker\": 1}\n");
  it::write_file(run / "metrics/worker-0.jsonl", "{\"type\": \"end\"}\n");
}

// A directory's entries, sorted by name.
std::vector<std::string> entries(const it::fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : it::fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// Runs a shell command line; its exit code, and its output in `output`.
int run_command(const std::string& command, const it::fs::path& dir, std::string& output) {
  const auto file = dir / "command-output.txt";
  std::string line = command;
  line += " > ";
  line += file.string();
  line += " 2>&1 < /dev/null";
  const int status = std::system(line.c_str());
  output = it::read_file(file);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

TEST_CASE("an unknown model is a config error before anything starts, and the previous run stays") {
  it::TempDir dir;
  const auto run = dir.path() / "run";
  fake_finished_run(run);
  auto args = it::launch_args(kTinySync, run);
  args.insert(args.end(), {"--set", "workload.model=\"resnet50\""});
  const auto r = it::run_launch(args, dir.path(), 60s);
  INFO(r.output);
  CHECK(r.exit.code == 3);
  CHECK(it::contains(r.output, "--set workload.model=\"resnet50\": key 'workload.model': unknown model 'resnet50'; "
                               "known models: fmnist_cnn, small_cnn"));
  CHECK_FALSE(it::contains(r.output, " scheduler] "));
  CHECK(it::read_file(run / "summary.json") == "{\"marker\": 1}\n");  // untouched, not moved
  CHECK(entries(run) == std::vector<std::string>{"metrics", "summary.json"});
  CHECK(entries(dir.path()) == std::vector<std::string>{"launch-output.txt", "run"});  // no run.prev-*
}

TEST_CASE("a batch larger than a worker's shard is refused with the numbers") {
  it::TempDir dir;
  const auto run = dir.path() / "run";
  auto args = it::launch_args(kTinySync, run);
  args.insert(args.end(), {"--set", "workload.batch_size=4096"});
  const auto r = it::run_launch(args, dir.path(), 60s);
  INFO(r.output);
  CHECK(r.exit.code == 3);
  CHECK(it::contains(r.output, "--set workload.batch_size=4096: key 'workload.batch_size': 4096 is larger than a "
                               "worker's shard: 1024 training samples (synthetic) / 2 workers = 512 per worker"));
  CHECK_FALSE(it::fs::exists(run));

  // The largest batch that fits passes the check (--check runs them all and starts nothing).
  const auto fits = it::run_launch({"--config", kTinySync.string(), "--run-dir", run.string(), "--set",
                                    "workload.batch_size=512", "--check"},
                                   dir.path(), 60s);
  INFO(fits.output);
  CHECK(fits.exit.code == 0);
  CHECK(it::contains(fits.output, "batch_size = 512"));
  CHECK_FALSE(it::fs::exists(run));  // --check touches nothing
}

TEST_CASE("a second launch keeps the first run in RUN.prev-TIME and a live launch's directory is refused") {
  it::TempDir dir;
  const auto run = dir.path() / "run";
  const auto first = it::run_launch(it::launch_args(kTinySync, run), dir.path());
  INFO(first.output);
  REQUIRE(first.exit.code == 0);
  const std::string first_summary = it::read_file(run / "summary.json");
  REQUIRE_FALSE(first_summary.empty());
  CHECK(it::read_file(run / "launch.lock").empty());  // released at the end
  {  // time to accuracy is on the training clock: never past the training wall time
    using pstrain::report::parse_json;
    const auto summary = parse_json(first_summary, "summary.json");
    const double wall = summary.find("wall_time_s")->as_number("wall_time_s");
    const auto& tta = *summary.find("time_to_accuracy");
    for (std::size_t i = 0; i < tta.items().size(); ++i) {
      if (!tta.items()[i].is_null()) CHECK(tta.items()[i].as_number("t") <= wall);
    }
    std::istringstream lines(it::read_file(run / "metrics/worker-0.jsonl"));
    double last_eval = -1, end = -1, eval_s = -1;
    for (std::string line; std::getline(lines, line);) {
      const auto rec = parse_json(line, "worker-0.jsonl");
      const std::string& type = rec.find("type")->as_string("type");
      if (type == "eval") last_eval = rec.find("time_s")->as_number("t"), eval_s = rec.find("eval_s")->as_number("e");
      if (type == "end") end = rec.find("time_s")->as_number("t");
    }
    CHECK(last_eval >= 0);
    CHECK(last_eval <= end);  // the final evaluation's time is the end of training
    CHECK(eval_s > 0);        // an evaluation takes time
  }

  {  // a live owner: this test process holds the lock
    pstrain::launcher::RunDirLock held(run);
    const auto refused = it::run_launch(it::launch_args(kTinySync, run), dir.path(), 60s);
    INFO(refused.output);
    CHECK(refused.exit.code == 3);
    CHECK(it::contains(refused.output, "refused: run directory " + run.string() + " is in use by launch pid " +
                                           std::to_string(getpid())));
    CHECK(it::read_file(run / "summary.json") == first_summary);
  }

  // A launcher that died holding the lock: its pid is still in the file, the flock is gone.
  it::write_file(run / "launch.lock", "999999999\n");
  auto args = it::launch_args(kTinySync, run);
  args.insert(args.end(), {"--set", "workload.max_steps=3"});
  const auto second = it::run_launch(args, dir.path());
  INFO(second.output);
  REQUIRE(second.exit.code == 0);
  CHECK(it::contains(second.output, "took over the lock of " + run.string() + " from launch pid 999999999"));
  std::vector<it::fs::path> kept;
  for (const auto& e : it::fs::directory_iterator(dir.path())) {
    if (e.path().filename().string().rfind("run.prev-", 0) == 0) kept.push_back(e.path());
  }
  REQUIRE(kept.size() == 1);
  CHECK(it::contains(second.output, "kept the previous run's "));
  CHECK(it::contains(second.output, kept[0].string()));
  CHECK(it::read_file(kept[0] / "summary.json") == first_summary);  // the first run, whole
  CHECK(it::fs::exists(kept[0] / "metrics/worker-1.jsonl"));
  CHECK(it::fs::exists(kept[0] / "config.toml"));
  CHECK(it::read_file(run / "summary.json") != first_summary);  // the new run's own
}

TEST_CASE("a misspelt flag is named with the right one, and the config may be positional") {
  it::TempDir dir;
  const auto typo = it::run_launch({"--cofnig", "x.toml"}, dir.path(), 60s);
  INFO(typo.output);
  CHECK(typo.exit.code == 3);
  CHECK(it::contains(typo.output, "launch: --cofnig: unknown option; did you mean --config?"));

  const auto none = it::run_launch({"--quiet"}, dir.path(), 60s);
  CHECK(none.exit.code == 3);
  CHECK(it::contains(none.output, "launch: no config: give it as --config FILE (or as the one positional argument)"));

  const auto twice = it::run_launch({kTinySync.string(), "--config", kTinySync.string()}, dir.path(), 60s);
  CHECK(twice.exit.code == 3);
  CHECK(it::contains(twice.output, "the config is given twice"));

  const auto positional = it::run_launch({kTinySync.string(), "--check"}, dir.path(), 60s);
  INFO(positional.output);
  CHECK(positional.exit.code == 0);
  CHECK(it::contains(positional.output, "model = \"small_cnn\""));
}

TEST_CASE("a worker or server without --scheduler on a port-0 config fails at once with the fix") {
  it::TempDir dir;
  for (const char* program : {"pstrain-worker", "pstrain-server"}) {
    std::string output;
    const auto start = std::chrono::steady_clock::now();
    std::string command = (it::kBinDir / program).string();
    command += " --config ";
    command += kTinySync.string();
    command += " --rank 0";
    const int code = run_command(command, dir.path(), output);
    INFO(program, ": ", output);
    CHECK(code == 3);
    CHECK(std::chrono::steady_clock::now() - start < 10s);
    CHECK(it::contains(output, "cluster.scheduler = 'tcp://127.0.0.1:0' has port 0"));
    CHECK(it::contains(output, "pass --scheduler tcp://HOST:PORT"));
  }
}
