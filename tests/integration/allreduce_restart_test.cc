// cluster.on_worker_failure = "restart" in allreduce mode, with real
// processes: a worker killed with SIGKILL at a seeded step is dropped, the
// survivors re-form the collective without it and go on, the launcher starts
// it again (--rank R --rejoin), and at the next epoch's end the survivors take
// it back into the collective (worker/train/allreduce_worker.h,
// AllreduceJoin): it takes the most advanced replica's weights, optimizer
// state and step and trains to the end with them. The launcher exits 0, the
// summary lists the restart, the accuracy is near the unfailed run's, and the
// replica check after the last epoch (an allreduce of weight fingerprints over
// all three workers) passed, i.e. the final weights are equal on every replica.
#include <doctest/doctest.h>

#include <cstdio>
#include <map>
#include <random>
#include <regex>
#include <sstream>

#include "tests/integration/launch_test_util.h"

namespace {

constexpr double kAccuracyTolerance = 0.10;
// Long enough that the survivors are still training when the restarted
// process is up (it is taken back at an epoch's end): with 4 epochs (~2 s of
// training) a loaded machine once let them finish first, and the summary had
// no restart.
constexpr int kEpochs = 8;
constexpr std::int64_t kTrainSamples = 1024;  // configs/tiny_allreduce.toml: synthetic_train

std::vector<std::string> args_for(const it::fs::path& run, int checkpoint_every = 0) {
  auto args = it::launch_args(it::kSourceDir / "configs/tiny_allreduce.toml", run);
  if (checkpoint_every > 0) {
    args.insert(args.end(), {"--set", "checkpoint.interval_steps=" + std::to_string(checkpoint_every), "--set",
                             "checkpoint.keep=1000"});
  }
  args.insert(args.end(), {"--set", "cluster.workers=3", "--set", "cluster.on_worker_failure=restart", "--set",
                           "cluster.max_restarts=3", "--set", "cluster.heartbeat_timeout_ms=1500", "--set",
                           "cluster.timeout_ms=30000", "--set", "workload.epochs=" + std::to_string(kEpochs), "--set",
                           "output.trace=off", "--quiet"});
  return args;
}

std::optional<double> final_accuracy(const it::fs::path& run) {
  const std::string summary = it::read_file(run / "summary.json");
  std::smatch m;
  if (!std::regex_search(summary, m, std::regex("\"final_test_accuracy\": ([0-9.eE+-]+)"))) return std::nullopt;
  return std::stod(m[1].str());
}

int count_of(const std::string& text, const std::string& what) {
  int n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// epoch -> images in the "step" records of `text` (after `from`).
std::map<std::int64_t, std::int64_t> images_per_epoch(const std::string& text, std::size_t from = 0) {
  std::map<std::int64_t, std::int64_t> out;
  std::istringstream in(text.substr(from));
  const std::regex epoch("\"epoch\":([0-9]+)"), batch("\"batch\":([0-9]+)");
  for (std::string line; std::getline(in, line);) {
    if (line.find("\"type\":\"step\"") == std::string::npos) continue;
    std::smatch e, b;
    if (std::regex_search(line, e, epoch) && std::regex_search(line, b, batch)) out[std::stoll(e[1])] += std::stoll(b[1]);
  }
  return out;
}

// The final accuracy of the same run without a kill (run once).
double unfailed_accuracy() {
  static double reference = -1.0;
  if (reference >= 0.0) return reference;
  {
    it::TempDir dir;
    const auto run = dir.path() / "run";
    it::LaunchProcess p(args_for(run), dir.path() / "out.txt");
    const auto exit = p.wait(std::chrono::seconds(240));
    INFO(p.output());
    REQUIRE(exit.has_value());
    REQUIRE(exit->code == 0);
    const auto acc = final_accuracy(run);
    REQUIRE(acc.has_value());
    reference = *acc;
  }
  return reference;
}

// `checkpoint_every` > 0: a checkpoint every so many steps, taken by the
// collective (not a scheduler barrier the restarted worker would count in
// before it is back in the collective): none may be missing or incomplete.
void kill_and_take_back(int victim, unsigned seed, int checkpoint_every = 0) {
  const double reference = unfailed_accuracy();
  std::mt19937 rng(seed);
  const int kill_after = 2 + static_cast<int>(rng() % 6);  // the victim's step records before the kill (epoch 0 has 11)
  MESSAGE("allreduce restart: kill -9 worker " << victim << " after " << kill_after << " steps (seed " << seed << ")");
  it::TempDir dir;
  const auto run = dir.path() / "run";
  it::LaunchProcess p(args_for(run, checkpoint_every), dir.path() / "out.txt");
  const auto metrics = run / ("metrics/worker-" + std::to_string(victim) + ".jsonl");
  const bool training =
      it::wait_until([&] { return count_of(it::read_file(metrics), "\"type\":\"step\"") >= kill_after; },
                     std::chrono::seconds(180), "worker step records before the kill");
  INFO(p.output());
  REQUIRE(training);
  const auto pids = it::read_pids(run);
  const std::string name = "worker-" + std::to_string(victim);
  REQUIRE(pids.count(name) == 1);
  REQUIRE(kill(pids.at(name), SIGKILL) == 0);

  const auto exit = p.wait(std::chrono::seconds(240));
  const std::string output = p.output();
  INFO(output);
  REQUIRE(exit.has_value());
  CHECK_FALSE(exit->signaled);
  CHECK(exit->code == 0);
  const std::string v = std::to_string(victim);
  CHECK(it::contains(output, "worker " + v + " was killed by signal 9 (Killed): restarting it (1 of 3, "
                             "cluster.on_worker_failure = \"restart\")"));
  CHECK(it::contains(it::read_file(run / "logs/scheduler.log"), "worker " + v + " rejoined the job"));
  const std::string summary = it::read_file(run / "summary.json");
  CHECK(it::contains(summary, "\"restarts\": [{\"rank\": " + v + ","));

  // The survivors took it back at an epoch's end; it joined that collective with their weights.
  std::vector<int> survivors;
  for (int w = 0; w < 3; ++w) {
    if (w != victim) survivors.push_back(w);
  }
  for (const int w : survivors) {
    CAPTURE(w);
    CHECK(it::contains(it::read_file(run / ("logs/worker-" + std::to_string(w) + ".log")),
                       "took rejoined worker(s) " + v + " back into the collective"));
  }
  const std::string victim_log = it::read_file(run / ("logs/worker-" + v + ".log"));
  CHECK(it::contains(victim_log, "rejoined the collective: 3 workers (0,1,2)"));

  // Its metrics: the predecessor's records, the rejoin, then steps of its own to the end.
  const std::string victim_metrics = it::read_file(metrics);
  const auto rejoin = victim_metrics.find("\"type\":\"rejoin\"");
  REQUIRE(rejoin != std::string::npos);
  CHECK(victim_metrics.find("\"type\":\"step\"") < rejoin);
  CHECK(victim_metrics.find("\"type\":\"step\"", rejoin) != std::string::npos);
  for (int w = 0; w < 3; ++w) {
    CAPTURE(w);
    CHECK(it::contains(it::read_file(run / ("metrics/worker-" + std::to_string(w) + ".jsonl")), "\"type\":\"end\""));
  }
  // The epochs after the rejoin: the three workers together trained every sample once (each
  // shard is ceil(1024 / 3) = 342 samples: the sampler pads the last two with repeats).
  std::map<std::int64_t, std::int64_t> images = images_per_epoch(victim_metrics, rejoin);
  REQUIRE_FALSE(images.empty());
  const std::int64_t first = images.begin()->first;
  for (const int w : survivors) {
    for (const auto& [epoch, n] : images_per_epoch(it::read_file(run / ("metrics/worker-" + std::to_string(w) + ".jsonl")))) {
      if (epoch >= first) images[epoch] += n;
    }
  }
  for (const auto& [epoch, n] : images) {
    CAPTURE(epoch);
    CHECK(n == 3 * ((kTrainSamples + 2) / 3));
  }
  CHECK(first < kEpochs);

  // The replica check after the last epoch passed on all three (it fails the job otherwise).
  for (int w = 0; w < 3; ++w) {
    CHECK_FALSE(it::contains(it::read_file(run / ("logs/worker-" + std::to_string(w) + ".log")), "differ from another"));
  }
  const auto acc = final_accuracy(run);
  REQUIRE(acc.has_value());
  it::note("allreduce restart: final accuracy " + std::to_string(*acc) + ", without the kill " + std::to_string(reference));
  CHECK(std::abs(*acc - reference) <= kAccuracyTolerance);
  CHECK(it::fs::exists(run / "weights.bin"));
  // The lowest worker evaluates: worker 0, back in the job, again after its return.
  if (victim == 0) CHECK(victim_metrics.find("\"type\":\"eval\"", rejoin) != std::string::npos);
  if (checkpoint_every > 0) {
    // Every checkpoint due was taken and is complete; the last ones hold the rejoined worker's part.
    const std::string end = victim_metrics.substr(victim_metrics.rfind("\"type\":\"end\""));
    std::smatch m;
    REQUIRE(std::regex_search(end, m, std::regex("\"steps\":([0-9]+)")));
    const long steps = std::stol(m[1].str());
    long complete = 0;
    for (const auto& entry : it::fs::directory_iterator(run / "checkpoints")) {
      if (!entry.path().filename().string().starts_with("step-")) continue;
      CAPTURE(entry.path());
      CHECK(it::read_file(entry.path() / "manifest.json").size() > 0);
      ++complete;
    }
    CHECK(complete == steps / checkpoint_every);
    const auto newest = run / "checkpoints" / ("step-" + std::string(8 - std::to_string(steps - steps % checkpoint_every).size(), '0') +
                                               std::to_string(steps - steps % checkpoint_every));
    CHECK(it::fs::exists(newest / ("worker-" + v + ".ckpt")));
  }
}

}  // namespace

TEST_CASE("restart: an allreduce worker killed mid-run is started again and taken back into the collective") {
  kill_and_take_back(1, 9003);
}

TEST_CASE("restart: worker 0 killed mid-run in allreduce comes back, leads again and writes the weights") {
  kill_and_take_back(0, 9004);
}

TEST_CASE("restart: allreduce with a checkpoint every 2 steps: the kill, the rejoin and every checkpoint complete") {
  kill_and_take_back(1, 9005, 2);
}
