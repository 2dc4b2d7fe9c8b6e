// cluster.on_worker_failure = "continue" with real processes: a worker
// killed with SIGKILL in the middle of a run is dropped after the heartbeat
// timeout, the others finish the training, the launcher exits 0 and the
// summary says who was dropped and how many updates were made without it.
// In allreduce the survivors re-form the collective among themselves.
//
// The kill comes after a seeded random number of the victim's steps in epoch
// 0 (the seed is printed; PSTRAIN_FAULT_SEED=<seed> repeats a run). Each run
// also checks that the survivors shard the whole training set from the first
// epoch without the victim (worker/train/epoch_members.h), that the final
// accuracy is near the unfailed run's, and the servers' update counts.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <map>
#include <sstream>
#include <random>

#include "tests/integration/launch_test_util.h"
#include "tools/report/json_value.h"

namespace {

namespace report = pstrain::report;

constexpr std::int64_t kTrainSamples = 1024;  // configs/tiny_*.toml: synthetic_train

// PSTRAIN_FAULT_SEED, else a fresh one; printed either way.
std::uint64_t fault_seed() {
  static const std::uint64_t seed = [] {
    const char* env = std::getenv("PSTRAIN_FAULT_SEED");
    const std::uint64_t s = env != nullptr && *env != '\0' ? std::strtoull(env, nullptr, 10) : std::random_device{}();
    MESSAGE("fault seed " << s << " (PSTRAIN_FAULT_SEED=" << s << " repeats these kills)");
    return s;
  }();
  return seed;
}

// How many of the victim's steps to wait for before the kill: 1..6 of the 11
// of epoch 0 with 3 workers (1024 samples, batch 32). The kill lands a few
// steps later on a busy machine; the check below allows for that.
int kill_after_steps(const std::string& mode, int victim) {
  std::mt19937_64 rng(fault_seed() ^ (std::hash<std::string>{}(mode) * 31 + static_cast<std::uint64_t>(victim)));
  return 1 + static_cast<int>(rng() % 6);
}

std::vector<report::JsonValue> json_lines(const it::fs::path& file) {
  std::vector<report::JsonValue> lines;
  std::istringstream in(it::read_file(file));
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) lines.push_back(report::parse_json(line, file.string()));
  }
  return lines;
}

std::string type_of(const report::JsonValue& v) { return v.find("type")->as_string("type"); }
std::int64_t integer(const report::JsonValue& v, const char* key) {
  const report::JsonValue* x = v.find(key);
  REQUIRE(x != nullptr);
  return x->as_integer(key);
}

// Final test accuracy of the unfailed runs (3 workers, seed 1, this test's
// settings without the kill; measured: sync 0.992 and allreduce 0.992 in 3
// epochs, async 1.000 in 40 at it::tiny_async_rate). A failed run must come within kAccuracyTolerance: it
// trains the same data, with 2 workers from the epoch after the drop (runs
// measured 0.94-1.00); a run that stopped learning would be far below.
double unfailed_accuracy(const std::string& mode) {
  if (mode == "async") return 1.0;
  return 0.9921875;  // sync, allreduce
}
constexpr double kAccuracyTolerance = 0.15;

// After the run: the survivors split the training set from the first epoch
// without the victim (a "plan" record with 2 workers; epoch 1 in sync and
// allreduce, where the others wait for the drop within epoch 0) and each
// such epoch's samples add up to it; the final accuracy is near the unfailed
// run's; no push was refused, none applied twice.
void check_takeover(const it::fs::path& run, const std::string& mode, int victim, const std::vector<int>& survivors,
                    int epochs) {
  std::map<std::int64_t, std::int64_t> samples;  // epoch -> the survivors' samples
  std::int64_t takeover = -1;
  std::int64_t final_steps = -1;
  for (const int w : survivors) {
    CAPTURE(w);
    std::int64_t first = -1;
    for (const auto& line : json_lines(run / ("metrics/worker-" + std::to_string(w) + ".jsonl"))) {
      const std::string type = type_of(line);
      if (type == "plan" && line.find("workers") != nullptr && first < 0) {
        CHECK(integer(line, "workers") == 2);
        CHECK(integer(line, "steps_per_epoch") == kTrainSamples / 2 / 32);
        first = integer(line, "epoch");
      }
      if (type == "step") samples[integer(line, "epoch")] += integer(line, "batch");
      if (type == "end") {
        if (final_steps >= 0 && mode != "async") CHECK(integer(line, "steps") == final_steps);  // lockstep
        final_steps = integer(line, "steps");
      }
    }
    if (w == survivors.front()) takeover = first;
    CHECK(first == takeover);  // both had the scheduler's one answer
  }
  // The scheduler's answers: the first epoch it gave without the victim.
  std::int64_t scheduler_takeover = -1;
  {
    std::istringstream in(it::read_file(run / "logs/scheduler.log"));
    for (std::string line; std::getline(in, line);) {
      const auto at = line.find("] epoch ");
      const auto shared = line.find(" is shared by workers ");
      if (at == std::string::npos || shared == std::string::npos || scheduler_takeover >= 0) continue;
      if (line.substr(shared + 22) != "0,1,2") scheduler_takeover = std::stoll(line.substr(at + 8, shared - at - 8));
    }
  }
  CHECK(scheduler_takeover == takeover);
  // The victim's steps, by text: the kill may have cut its last line.
  std::int64_t victim_steps = 0;
  {
    std::istringstream in(it::read_file(run / ("metrics/worker-" + std::to_string(victim) + ".jsonl")));
    for (std::string line; std::getline(in, line);) victim_steps += it::contains(line, "\"type\":\"step\"") ? 1 : 0;
  }
  CAPTURE(victim_steps);
  // Sync and allreduce wait for the victim: killed before it could push the
  // last step of epoch 0 (step 10), the drop came within epoch 0 and epoch 1
  // is the survivors'; killed later, the first ask of epoch 1 may precede the
  // drop, and then epoch 2 is theirs. The victim's record of a step is written
  // after its push, so a kill between the two leaves one step pushed but not
  // recorded: 9 records may still mean step 10 was pushed (seen under load).
  if (mode != "async" && victim_steps <= 8) CHECK(takeover == 1);
  if (mode != "async" && victim_steps > 8) CHECK((takeover == 1 || takeover == 2));
  // Async waits for nobody: the survivors may have begun every epoch before the drop.
  if (mode == "async" && takeover < 0) MESSAGE("async: the survivors began every epoch before the drop");
  if (mode != "async") REQUIRE(takeover >= 1);
  for (std::int64_t e = takeover; takeover >= 1 && e < epochs; ++e) {
    CAPTURE(e);
    CHECK(samples[e] == kTrainSamples);  // every sample once
  }

  const report::JsonValue summary = report::parse_json(it::read_file(run / "summary.json"), "summary.json");
  const double accuracy = summary.find("final_test_accuracy")->as_number("final_test_accuracy");
  CAPTURE(accuracy);
  CHECK(std::abs(accuracy - unfailed_accuracy(mode)) <= kAccuracyTolerance);

  if (mode == "allreduce") return;
  std::int64_t updates = 0, accepted = 0, rejected = 0, skips = 0;
  for (int s = 0; s < 2; ++s) {
    const auto server = report::parse_json(it::read_file(run / ("metrics/server-" + std::to_string(s) + ".json")), "server");
    updates += integer(server, "updates");
    accepted += integer(server, "pushes_accepted");
    rejected += integer(server, "pushes_rejected");
    skips += integer(server, "skip_pushes");
  }
  CAPTURE(updates);
  CAPTURE(accepted);
  CHECK(rejected == 0);
  CHECK(skips == 0);
  if (mode == "async") {
    CHECK(updates == accepted);  // each accepted push applied once
    return;
  }
  // sync: one update per chunk and step; the pushes are the survivors' steps
  // and the victim's (the steps it recorded, perhaps one more it pushed).
  REQUIRE(final_steps > 0);
  REQUIRE(updates % final_steps == 0);
  const std::int64_t chunks = updates / final_steps;
  CHECK(accepted >= chunks * (2 * final_steps + victim_steps));
  CHECK(accepted <= chunks * (2 * final_steps + victim_steps + 1));
}

void kill_worker_mid_run(const std::string& mode, int victim = 1) {
  // Async waits for nobody: its survivors run ahead of the heartbeat timeout, so
  // its run is longer, for the drop to come before its last epochs begin.
  const int epochs = mode == "async" ? 40 : 3;
  it::TempDir dir;
  const auto run = dir.path() / "run";
  auto args = it::launch_args(it::kSourceDir / (mode == "allreduce" ? "configs/tiny_allreduce.toml" : "configs/tiny_sync.toml"), run);
  args.insert(args.end(), {"--set", "mode=" + mode, "--set", "cluster.workers=3", "--set",
                           "cluster.on_worker_failure=continue", "--set", "cluster.heartbeat_timeout_ms=1500",
                           "--set", "workload.epochs=" + std::to_string(epochs), "--set", "output.trace=off", "--quiet"});
  const std::vector<std::string> rate = it::tiny_async_rate(mode);
  args.insert(args.end(), rate.begin(), rate.end());
  it::LaunchProcess p(args, dir.path() / "out.txt");
  const auto metrics = run / ("metrics/worker-" + std::to_string(victim) + ".jsonl");
  const int kill_after = kill_after_steps(mode, victim);
  MESSAGE(mode << ": killing worker " << victim << " after its step " << kill_after - 1 << " (seed " << fault_seed() << ")");
  const bool training = it::wait_until([&] { return it::count_lines(metrics) >= 1 + kill_after; },
                                       std::chrono::seconds(180), "the step records before the kill");
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
  CHECK(it::contains(output, "worker " + std::to_string(victim) + " was killed by signal 9 (Killed): the job goes on without it"));
  const std::string scheduler_log = it::read_file(run / "logs/scheduler.log");
  CHECK(it::contains(scheduler_log, "worker " + std::to_string(victim)));
  CHECK(it::contains(scheduler_log, "dropped from the job"));
  const std::string summary = it::read_file(run / "summary.json");
  CHECK(it::contains(summary, "\"dropped_workers\": [" + std::to_string(victim) + "]"));
  if (mode == "sync") CHECK_FALSE(it::contains(summary, "\"partial_updates\": 0,"));
  // The membership change the survivors' plans record: 3 -> 2 workers from an epoch's start, a drop.
  CHECK(it::contains(summary, "\"old_workers\": 3, \"new_workers\": 2, \"reason\": \"drop\""));
  // The others trained to the end; worker 0, or the lowest one left, evaluated the final weights.
  std::vector<int> survivors;
  for (int w = 0; w < 3; ++w) {
    if (w != victim) survivors.push_back(w);
  }
  for (const int w : survivors) {
    CAPTURE(w);
    CHECK(it::contains(it::read_file(run / ("metrics/worker-" + std::to_string(w) + ".jsonl")), "\"type\":\"end\""));
  }
  CHECK(it::fs::exists(run / "weights.bin"));
  CHECK_FALSE(it::contains(summary, "\"final_test_accuracy\": null"));
  check_takeover(run, mode, victim, survivors, epochs);
  if (mode == "allreduce") {
    // Both survivors re-formed the collective as 2 workers and took the lowest one's state; the
    // replica check after each later epoch (an allreduce of weight fingerprints) passed.
    const std::string ranks = std::to_string(survivors[0]) + ", " + std::to_string(survivors[1]);
    for (const int w : survivors) {
      const std::string log = it::read_file(run / ("logs/worker-" + std::to_string(w) + ".log"));
      CAPTURE(w);
      CHECK(it::contains(log, "re-formed the collective without the dropped worker(s): 2 workers (" + ranks + ")"));
    }
  }
}

}  // namespace

TEST_CASE("continue: a worker killed mid-run in sync is dropped and the job finishes without it") {
  kill_worker_mid_run("sync");
}

TEST_CASE("continue: a worker killed mid-run in async is dropped and the job finishes without it") {
  kill_worker_mid_run("async");
}

TEST_CASE("continue: a worker killed mid-run in allreduce is dropped; the others re-form the collective and finish") {
  kill_worker_mid_run("allreduce");
}

TEST_CASE("continue: worker 0 killed mid-run in allreduce: worker 1 leads the others, evaluates and writes the weights") {
  kill_worker_mid_run("allreduce", 0);
}

// Worker 1 stopped with SIGSTOP and never continued (a hung process) under
// continue: the launcher fences it once the scheduler drops it, and the job
// ends with exit 0. Before fencing the survivors finished training, then the
// job failed waiting for the stopped process to exit (allreduce: after
// sitting cluster.timeout_ms in its end first).
static void stopped_never_continued(const std::string& mode) {
  it::TempDir dir;
  const auto run = dir.path() / "run";
  auto args = it::launch_args(it::kSourceDir / (mode == "allreduce" ? "configs/tiny_allreduce.toml" : "configs/tiny_sync.toml"), run);
  args.insert(args.end(), {"--set", "mode=" + mode, "--set", "cluster.workers=3", "--set",
                           "cluster.on_worker_failure=continue", "--set", "cluster.heartbeat_timeout_ms=1000", "--set",
                           "workload.epochs=6", "--set", "output.trace=off", "--quiet", "--shutdown-timeout-s", "100"});
  const std::vector<std::string> rate = it::tiny_async_rate(mode);
  args.insert(args.end(), rate.begin(), rate.end());
  it::LaunchProcess p(args, dir.path() / "out.txt");
  const auto metrics = run / "metrics/worker-1.jsonl";
  const int stop_after = kill_after_steps(mode + ", SIGSTOP", 1);
  MESSAGE(mode << ": stopping worker 1 after its step " << stop_after - 1 << " (seed " << fault_seed() << ")");
  REQUIRE(it::wait_until([&] { return it::count_lines(metrics) >= 1 + stop_after; }, std::chrono::seconds(180),
                         "the step records before the SIGSTOP"));
  const pid_t w1 = it::read_pids(run).at("worker-1");
  const auto stopped_at = std::chrono::steady_clock::now();
  REQUIRE(kill(w1, SIGSTOP) == 0);
  const auto exit = p.wait(std::chrono::seconds(240));
  const std::string output = p.output();
  INFO(output);
  REQUIRE(exit.has_value());
  CHECK(exit->code == 0);
  // Nothing waits for a time limit: not timeout_ms (120 s), not --shutdown-timeout-s (100 s here;
  // the rest of the training takes seconds).
  CHECK(std::chrono::steady_clock::now() - stopped_at < std::chrono::seconds(90));
  CHECK(it::contains(output, it::fenced_line("worker 1", w1)));
  CHECK(it::contains(output, "worker 1 was killed by signal 9 (Killed): the job goes on without it"));
  CHECK(it::contains(it::read_file(run / "logs/scheduler.log"), "dropped from the job"));
  CHECK(it::contains(it::read_file(run / "summary.json"), "\"dropped_workers\": [1]"));
  CHECK(it::contains(it::read_file(run / "failures.jsonl"), "\"role\":\"worker\",\"rank\":1,"));
  for (int w : {0, 2}) CHECK(it::contains(it::read_file(run / ("metrics/worker-" + std::to_string(w) + ".jsonl")), "\"type\":\"end\""));
  CHECK(it::process_gone(w1));
}

TEST_CASE("continue: a worker stopped (SIGSTOP) and never continued is dropped and fenced; the job ends well (sync)") {
  stopped_never_continued("sync");
}

TEST_CASE("continue: a worker stopped (SIGSTOP) and never continued is dropped and fenced; the job ends well (async)") {
  stopped_never_continued("async");
}

TEST_CASE("continue: a worker stopped (SIGSTOP) and never continued is dropped and fenced; the job ends well (allreduce)") {
  stopped_never_continued("allreduce");
}

// Without the launcher (roles started by hand, as under SLURM) nobody fences
// a stopped worker: woken, it must learn by itself that it was dropped and exit.
TEST_CASE("continue, roles started by hand: a worker stopped past the heartbeat timeout is dropped; woken, it learns it and exits") {
  it::TempDir dir;
  const auto run = dir.path() / "run";
  const std::string port = std::to_string(it::free_port());
  const std::string config = (it::kSourceDir / "configs/tiny_sync.toml").string();  // 2 servers
  const std::vector<std::string> common{"--config", config, "--set", "output.run_dir=" + run.string(), "--set",
                                        "workload.epochs=6", "--set", "cluster.workers=3", "--set",
                                        "cluster.on_worker_failure=continue", "--set",
                                        "cluster.heartbeat_timeout_ms=1000", "--set", "output.trace=off", "--set",
                                        it::secret_override(dir.path())};
  auto role = [&](const std::string& program, int rank) {
    std::vector<std::string> argv{(it::kBinDir / program).string()};
    argv.insert(argv.end(), common.begin(), common.end());
    argv.insert(argv.end(), {"--scheduler", "tcp://127.0.0.1:" + port, "--rank", std::to_string(rank)});
    return argv;
  };
  std::vector<std::string> sched{(it::kBinDir / "pstrain-scheduler").string()};
  sched.insert(sched.end(), common.begin(), common.end());
  sched.insert(sched.end(), {"--set", "cluster.scheduler=tcp://127.0.0.1:" + port});
  const auto out = [&](const std::string& name) { return dir.path() / (name + ".txt"); };
  std::vector<std::pair<std::string, pid_t>> nodes{{"scheduler", it::spawn(sched, {}, out("scheduler"))}};
  struct Reaper {  // whatever a failed REQUIRE leaves running
    std::vector<std::pair<std::string, pid_t>>& nodes;
    ~Reaper() {
      for (auto& [name, pid] : nodes) {
        if (pid <= 0) continue;
        kill(pid, SIGCONT);
        kill(pid, SIGKILL);
        waitpid(pid, nullptr, 0);
      }
    }
  } reaper{nodes};
  for (int s = 0; s < 2; ++s) {
    nodes.emplace_back("server-" + std::to_string(s), it::spawn(role("pstrain-server", s), {}, out("server-" + std::to_string(s))));
  }
  for (int w = 0; w < 3; ++w) {
    nodes.emplace_back("worker-" + std::to_string(w), it::spawn(role("pstrain-worker", w), {}, out("worker-" + std::to_string(w))));
  }
  const pid_t w1 = nodes[4].second;
  const int stop_after = kill_after_steps("sync, SIGSTOP by hand", 1);
  MESSAGE("stopping worker 1 after its step " << stop_after - 1 << " (seed " << fault_seed() << ")");
  const bool training =
      it::wait_until([&] { return it::count_lines(run / "metrics/worker-1.jsonl") >= 1 + stop_after; },
                     std::chrono::seconds(180), "worker 1's step records before the SIGSTOP");
  INFO(it::read_file(out("scheduler")));
  REQUIRE(training);
  REQUIRE(kill(w1, SIGSTOP) == 0);
  const bool dropped =
      it::wait_until([&] { return it::contains(it::read_file(out("scheduler")), "dropped from the job"); },
                     std::chrono::seconds(30), "the scheduler's \"dropped from the job\" line");
  REQUIRE(kill(w1, SIGCONT) == 0);
  CHECK(dropped);
  for (auto& [name, pid] : nodes) {
    CAPTURE(name);
    const std::optional<int> code = it::wait_exit(pid, std::chrono::seconds(180));
    if (code) pid = -1;  // reaped
    INFO(it::read_file(out(name)));
    REQUIRE(code.has_value());
    CAPTURE(*code);  // 128 + a signal: it died without a word (CI saw that once for worker 1, not reproduced)
    // The woken worker leaves on its own with an error code, naming why; the rest finish the job.
    if (name == "worker-1") {
      CHECK(*code != 0);
      CHECK(it::contains(it::read_file(out(name)), "dropped"));
    } else {
      CHECK(*code == 0);
    }
  }
}

TEST_CASE("abort: a worker stopped past the heartbeat timeout is named in the launcher's headline") {
  it::TempDir dir;
  const auto run = dir.path() / "run";
  auto args = it::launch_args(it::kSourceDir / "configs/tiny_sync.toml", run);
  args.insert(args.end(), {"--set", "cluster.heartbeat_timeout_ms=1000", "--set", "workload.epochs=100", "--set",
                           "output.trace=off", "--quiet"});
  it::LaunchProcess p(args, dir.path() / "out.txt");
  REQUIRE(it::wait_until([&] { return it::count_lines(run / "metrics/worker-1.jsonl") >= 4; },
                         std::chrono::seconds(180), "4 metrics lines of worker 1"));
  const pid_t w1 = it::read_pids(run).at("worker-1");
  REQUIRE(kill(w1, SIGSTOP) == 0);
  const auto exit = p.wait(std::chrono::seconds(60));
  kill(w1, SIGCONT);  // let the stopped process take its SIGTERM
  const std::string output = p.output();
  INFO(output);
  REQUIRE(exit.has_value());
  CHECK(exit->code == 1);
  // The first line after the failure names the culprit, not whichever process exited first.
  const auto headline = output.find("the scheduler aborted the job: worker 1");
  CHECK(headline != std::string::npos);
  CHECK(it::contains(output, "sent no heartbeat"));
  const auto first_exit_line = output.find("exited with code 2");
  CHECK((first_exit_line == std::string::npos || headline < first_exit_line));
}
