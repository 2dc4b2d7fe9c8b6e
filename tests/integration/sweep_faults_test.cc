// The fault sweep (the project's standards: sweep workers 1, 2, 4, 8, the
// modes, seeds and faults for every feature that touches coordination): one
// table of jobs through the launcher (configs/tiny_*.toml, real processes over
// loopback), each with one fault applied to one node at a step drawn from the
// case's seed:
//   - kill -9 of a worker mid-step under on_worker_failure "continue" and "restart";
//   - SIGSTOP of a worker, or of a server, past the heartbeat timeout, then
//     SIGCONT once the scheduler has declared it failed (docs/architecture.md
//     section 5, "Fencing": the launcher kills the silent process; a worker
//     woken first learns it was dropped and exits; the job goes on without it,
//     or with its replacement);
//   - SIGSTOP shorter than the heartbeat timeout: nothing is dropped.
// Each case checks what the user reads: the launcher's exit code and
// summary.json (per-worker status, steps and images against the step records,
// drops, restarts, server restarts, the accuracy band, ssp's bound and the
// staleness records), every epoch's coverage of the training set, and that
// no process of the job is left behind. -tc='sweep kill-sync-1w*' runs one case.
#include <doctest/doctest.h>

#include <cstdlib>
#include <random>

#include "tests/integration/sweep_util.h"

namespace {

using sweep::JsonValue;

enum class Fault { kKill9, kStopPastTimeout, kStopShort, kStraggler };

struct Case {
  const char* label;
  std::string mode;
  int workers;
  std::string policy;  // on_worker_failure, or on_server_failure for a server victim
  Fault fault;
  std::string role;  // "worker" or "server"
  int victim;
  unsigned seed;        // workload.seed and the fault's step
  int epochs;
  double min_accuracy;  // the band: the unfailed run reaches 0.95 or more (measured, see kCases)
  std::vector<std::string> sets{};
  // The fault right after the watched worker's last step record of an epoch (allreduce: often
  // during the replica check that ends the epoch; the test case after the table makes sure of it),
  // and cluster.timeout_ms 90 s: the job must end well before it, no survivor waiting out a
  // collective operation's timeout (docs/architecture.md section 5).
  bool epoch_end = false;
};

// Simulated compute trains nothing: its summary's final_test_accuracy is null (min_accuracy < 0).
constexpr double kSimulated = -1.0;
const std::vector<std::string> kFast = {"workload.simulated_step_ms=0.05"};

const char* fault_name(Fault f) {
  switch (f) {
    case Fault::kKill9: return "kill -9";
    case Fault::kStopPastTimeout: return "SIGSTOP past the heartbeat timeout, then SIGCONT";
    case Fault::kStopShort: return "SIGSTOP for 1 s (timeout 10 s), then SIGCONT";
    case Fault::kStraggler: return "a 4x straggler (workload.straggler_slowdown)";
  }
  return "?";
}

// Steps per worker per epoch with `workers` workers (1024 samples, batch 32).
int steps_per_epoch(int workers) { return static_cast<int>(sweep::kTrainSamples / sweep::kBatch / workers); }

std::vector<std::string> job_args(const Case& c, const it::fs::path& run) {
  const bool allreduce = c.mode == "allreduce";
  auto args = it::launch_args(it::kSourceDir / (allreduce ? "configs/tiny_allreduce.toml" : "configs/tiny_sync.toml"), run);
  // 4 s: a node starved for 1.6 s under load (2 cores, load 40) was declared failed at 1.5 s.
  const std::string timeout = c.fault == Fault::kStopShort || c.fault == Fault::kStraggler ? "10000" : "4000";
  const std::string collective_timeout = c.epoch_end ? "90000" : "30000";
  args.insert(args.end(), {"--set", "mode=" + c.mode, "--set", "cluster.workers=" + std::to_string(c.workers), "--set",
                           "cluster.heartbeat_timeout_ms=" + timeout, "--set", "cluster.timeout_ms=" + collective_timeout, "--set",
                           "workload.epochs=" + std::to_string(c.epochs), "--set",
                           "workload.seed=" + std::to_string(c.seed), "--set", "output.trace=off", "--quiet"});
  // Each push applied on its own: tiny_async.toml's rate (at 0.05, 8 workers' ssp and async runs
  // diverged for some seeds: accuracy 0.10-0.32; at 0.025 every one measured reached 0.99-1.0).
  const std::vector<std::string> rate = it::tiny_async_rate(c.mode);
  args.insert(args.end(), rate.begin(), rate.end());
  if (c.fault == Fault::kStraggler) {
    args.insert(args.end(), {"--set", "workload.straggler_rank=" + std::to_string(c.victim), "--set",
                             "workload.straggler_slowdown=4"});
  }
  if (c.role == "worker" && (c.fault == Fault::kKill9 || c.fault == Fault::kStopPastTimeout)) {
    args.insert(args.end(), {"--set", "cluster.on_worker_failure=" + c.policy});
  }
  if (c.role == "server" && c.policy == "restart") {
    args.insert(args.end(), {"--set", "cluster.on_server_failure=restart", "--set", "checkpoint.interval_steps=4"});
  }
  for (const std::string& s : c.sets) args.insert(args.end(), {"--set", s});
  return args;
}

// What the case expects of the job's end.
struct Expected {
  bool dropped = false;         // the victim worker is dropped for good
  bool restarted = false;       // the victim worker was replaced and finished
  bool server_restart = false;  // the victim server was replaced
  bool fault_drops = false;     // the scheduler declared the victim failed
  // A dropped victim's survivors split an epoch among themselves (summary.json's membership
  // change "drop"). Async waits for nobody: its survivors may have begun every epoch before the
  // drop, and then the victim's shards of those epochs stay untrained (docs/architecture.md
  // section 5); sync, ssp and allreduce wait for it within its epoch.
  bool took_over = false;
};

Expected expected_of(const Case& c) {
  Expected e;
  if (c.fault == Fault::kStopShort || c.fault == Fault::kStraggler) return e;
  e.fault_drops = true;
  if (c.role == "worker") {
    e.dropped = c.policy == "continue";
    e.restarted = c.policy == "restart";
  } else {
    e.server_restart = true;
  }
  return e;
}

// Applies the fault to `pid`; returns once it is done (SIGCONT sent).
void apply_fault(const Case& c, const it::fs::path& run, pid_t pid, it::LaunchProcess& launch) {
  if (c.fault == Fault::kStraggler) return;  // slow from the start
  if (c.fault == Fault::kKill9) {
    REQUIRE(kill(pid, SIGKILL) == 0);
    return;
  }
  REQUIRE(kill(pid, SIGSTOP) == 0);
  if (c.fault == Fault::kStopShort) {
    // Time is the feature here: a pause well within the timeout (10 s) must drop nobody.
    std::this_thread::sleep_for(std::chrono::seconds(1));
    REQUIRE(kill(pid, SIGCONT) == 0);
    return;
  }
  // Past the timeout: wait for the scheduler's verdict itself, then wake the process.
  const std::string record = "\"role\":\"" + c.role + "\",\"rank\":" + std::to_string(c.victim) + ",";
  const bool declared = it::wait_until([&] { return it::contains(it::read_file(run / "failures.jsonl"), record); },
                                       std::chrono::seconds(60), "the scheduler's verdict on the stopped " + c.role);
  kill(pid, SIGCONT);  // may be gone already: fenced
  INFO(launch.output());
  REQUIRE(declared);
}

// The images an epoch split over `members` workers takes: the shards are
// padded to members x ceil(1024 / members) (worker/data/shard_sampler.h).
std::int64_t epoch_images(int members) {
  return members * ((sweep::kTrainSamples + members - 1) / members);
}

// The images of `epoch` in the step records of every worker but the victim.
std::int64_t images_of_others(const Case& c, const it::fs::path& run, std::int64_t epoch) {
  std::int64_t images = 0;
  for (int w = 0; w < c.workers; ++w) {
    if (w == c.victim) continue;
    for (const JsonValue& line : sweep::json_lines(sweep::worker_metrics(run, w))) {
      if (sweep::type_of(line) == "step" && sweep::integer(line, "epoch") == epoch) images += sweep::integer(line, "batch");
    }
  }
  return images;
}

// Every epoch's images over all workers' step records: epochs before the one the
// fault came in are whole, and so is the last (the survivors' or the rejoined
// set's shards cover the training set), and none is empty.
void check_coverage(const Case& c, const it::fs::path& run, std::int64_t fault_epoch, const Expected& e) {
  const auto samples = sweep::samples_per_epoch(run, c.workers);
  REQUIRE(static_cast<int>(samples.size()) == c.epochs);
  for (const auto& [epoch, images] : samples) {
    CAPTURE(epoch);
    CAPTURE(images);
    CHECK(images > 0);
    if (epoch < fault_epoch || !e.fault_drops) CHECK(images == sweep::kTrainSamples);
    if (epoch != c.epochs - 1) continue;
    // A replacement not yet back when the last epoch began: split over the others, and the
    // replacement, if back within it, repeats a shard until it ends (worker/train/epoch_driver.cc:
    // "it repeats the shard of position 0"; seen in async, where nobody waits for it). In async
    // the others may also have begun every epoch before the drop (no membership change): their
    // shards of the first plan, the victim's untrained, the replacement back after the end.
    if (e.restarted) {
      const std::int64_t others = images_of_others(c, run, epoch);
      CHECK((images == epoch_images(c.workers) || others == epoch_images(c.workers - 1) ||
             (!e.took_over && c.mode == "async" && others == sweep::kTrainSamples / c.workers * (c.workers - 1))));
    }
    if (!e.dropped && !e.restarted) CHECK(images == epoch_images(c.workers));
    if (e.dropped && e.took_over) CHECK(images == epoch_images(c.workers - 1));
    if (e.dropped && !e.took_over) CHECK(images == sweep::kTrainSamples / c.workers * (c.workers - 1));
  }
}

void check_per_worker(const Case& c, const it::fs::path& run, const JsonValue& summary, const Expected& e) {
  const auto& per_worker = summary.find("per_worker")->items();
  REQUIRE(static_cast<int>(per_worker.size()) == c.workers);
  const std::int64_t total_steps = static_cast<std::int64_t>(c.epochs) * steps_per_epoch(c.workers);
  std::map<int, std::int64_t> steps;  // the workers left at the end: their steps_done
  for (int w = 0; w < c.workers; ++w) {
    CAPTURE(w);
    const JsonValue& pw = per_worker[static_cast<std::size_t>(w)];
    const std::string status = pw.find("status")->as_string("status");
    const bool victim = c.role == "worker" && w == c.victim;
    CHECK(pw.find("images")->as_integer("images") == sweep::images_recorded(run, w));
    CHECK(pw.find("skipped_steps")->as_integer("skipped_steps") == 0);
    if (victim && e.dropped) {
      CHECK(status == "dropped");
      CHECK(pw.find("dropped")->as_bool("dropped"));
      continue;
    }
    CHECK(status == (victim && e.restarted ? "restarted" : "done"));
    CHECK_FALSE(pw.find("dropped")->as_bool("dropped"));
    steps[w] = pw.find("steps_done")->as_integer("steps_done");
  }
  // Every worker left follows the same epoch plans to the end: the same last step. More steps
  // than the first plan's where an epoch was split over fewer workers (a drop, a rank away until
  // its replacement rejoined). Nobody waits for a replacement: it may rejoin after the others
  // finished (then its last step is its predecessor's; seen in async).
  const std::int64_t last = steps.rbegin()->first == c.victim && steps.size() > 1 ? steps.begin()->second
                                                                                   : steps.rbegin()->second;
  for (const auto& [w, done] : steps) {
    CAPTURE(w);
    CAPTURE(done);
    if (e.restarted && w == c.victim) {
      CHECK(done <= last);
    } else {
      CHECK(done == last);
    }
  }
  if (e.dropped) {
    if (e.took_over) CHECK(last > total_steps);  // the survivors took the victim's share over
    if (!e.took_over) CHECK(last == total_steps);  // async: every epoch begun before the drop
  } else if (c.role == "server" || !e.fault_drops) {
    CHECK(last == total_steps);  // nobody left: the first plan throughout
  } else {
    CHECK(last >= total_steps);
  }
}

void check_servers(const Case& c, const it::fs::path& run, const JsonValue& summary, const Expected& e) {
  if (c.mode == "allreduce") return;
  const int servers = 2;  // configs/tiny_sync.toml
  // A push refused is one from a dropped process (a woken worker) or a resent duplicate: neither
  // comes from a kill or a short pause.
  if (c.fault != Fault::kStopPastTimeout) CHECK(sweep::server_total(run, servers, "pushes_rejected") == 0);
  if (!e.server_restart) {
    CHECK(sweep::server_total(run, servers, "duplicate_pushes") == 0);
    CHECK(sweep::server_total(run, servers, "lost_updates") == 0);
    CHECK(summary.find("server_restarts")->items().empty());
  } else {
    const auto& restarts = summary.find("server_restarts")->items();
    REQUIRE(restarts.size() == 1);
    CHECK(sweep::integer(restarts[0], "server") == c.victim);
  }
  const std::int64_t partial = summary.find("partial_updates")->as_integer("partial_updates");
  if (c.mode == "sync" && !e.fault_drops) CHECK(partial == 0);
  if (c.mode == "sync" && e.dropped) CHECK(partial > 0);
  if (c.mode == "async" && !e.server_restart) {
    // Each accepted push applied once; a rejoiner's skip pushes are accepted without a gradient.
    CHECK(sweep::server_total(run, servers, "updates") ==
          sweep::server_total(run, servers, "pushes_accepted") - sweep::server_total(run, servers, "skip_pushes"));
  }
  if (c.mode == "ssp" || c.mode == "async") {
    it::check_staleness(*summary.find("staleness"));
  }
  if (c.mode == "ssp") {
    const JsonValue& ssp = *summary.find("ssp");
    const std::int64_t bound = ssp.find("staleness_bound")->as_integer("staleness_bound");
    CHECK(ssp.find("clock_gap_max")->as_integer("clock_gap_max") <= bound);
    // A push of step t is applied after at most the others' steps t-s .. t+s (no
    // worker's pull passes the slowest clock + s): (N-1)(2s+1) updates since its pull.
    const double max_staleness = summary.find("staleness")->find("max")->as_number("max");
    CHECK(max_staleness <= (c.workers - 1) * (2 * bound + 1));
    // Each step record's staleness (the largest of its pushes' means over their chunks) is one of
    // the servers' counts: never above their largest.
    for (int w = 0; w < c.workers; ++w) {
      CAPTURE(w);
      for (const JsonValue& line : sweep::json_lines(sweep::worker_metrics(run, w))) {
        if (sweep::type_of(line) == "step") CHECK(line.find("staleness")->as_number("staleness") <= max_staleness);
      }
    }
    if (c.fault == Fault::kStraggler) {
      // The fast workers wait for the straggler at the bound, not the other way round.
      const auto& per_worker = summary.find("per_worker")->items();
      const double straggler_blocked = per_worker[static_cast<std::size_t>(c.victim)].find("blocked_s")->as_number("b");
      for (int w = 0; w < c.workers; ++w) {
        CAPTURE(w);
        if (w != c.victim) CHECK(per_worker[static_cast<std::size_t>(w)].find("blocked_s")->as_number("b") > straggler_blocked);
      }
      if (bound == 0) CHECK(ssp.find("clock_gap_max")->as_integer("clock_gap_max") == 0);
    }
  }
}

// Allreduce under "restart": the replacement took its rank back into the collective at full
// size, the others took it in, and the last epoch was split over every worker again.
void check_allreduce_rejoin(const Case& c, const it::fs::path& run) {
  const std::string victim_log = it::read_file(run / "logs" / ("worker-" + std::to_string(c.victim) + ".log"));
  CHECK(it::contains(victim_log, "rejoined the collective: " + std::to_string(c.workers) + " workers"));
  for (int w = 0; w < c.workers; ++w) {
    if (w == c.victim) continue;
    CAPTURE(w);
    const std::string log = it::read_file(run / "logs" / ("worker-" + std::to_string(w) + ".log"));
    CHECK(it::contains(log, "took rejoined worker(s) " + std::to_string(c.victim) + " back into the collective"));
  }
  CHECK(sweep::samples_per_epoch(run, c.workers).rbegin()->second == epoch_images(c.workers));
}

void check_job(const Case& c, const it::fs::path& run, const std::string& output, std::int64_t fault_epoch,
               pid_t victim_pid) {
  Expected e = expected_of(c);
  const JsonValue summary = sweep::read_summary(run);
  for (const JsonValue& m : summary.find("membership_changes")->items()) {
    e.took_over |= sweep::integer(m, "old_workers") == c.workers && sweep::integer(m, "new_workers") == c.workers - 1 &&
                   m.find("reason")->as_string("reason") == "drop";
  }
  if (e.dropped && !e.took_over) it::note("sweep " + std::string(c.label) + ": the survivors began every epoch before the drop");
  CHECK(summary.find("mode")->as_string("mode") == c.mode);
  CHECK_FALSE(summary.find("partial")->as_bool("partial"));
  CHECK(summary.find("workers")->as_integer("workers") == c.workers);
  const std::set<std::int64_t> dropped = sweep::int_set(*summary.find("dropped_workers"));
  CHECK(dropped == (e.dropped ? std::set<std::int64_t>{c.victim} : std::set<std::int64_t>{}));
  const std::set<std::int64_t> restarts = sweep::int_set(*summary.find("restarts"), "rank");
  CHECK(restarts == (e.restarted ? std::set<std::int64_t>{c.victim} : std::set<std::int64_t>{}));
  check_per_worker(c, run, summary, e);
  check_coverage(c, run, fault_epoch, e);
  check_servers(c, run, summary, e);
  const JsonValue* accuracy = summary.find("final_test_accuracy");
  REQUIRE(accuracy != nullptr);
  if (c.min_accuracy == kSimulated) {
    CHECK(accuracy->is_null());  // simulated compute: no images, no evaluation
  } else {
    REQUIRE_FALSE(accuracy->is_null());
    CHECK(accuracy->as_number("final_test_accuracy") >= c.min_accuracy);
  }
  if (c.mode == "allreduce" && e.restarted) check_allreduce_rejoin(c, run);
  if (e.dropped && c.mode != "async") CHECK(e.took_over);
  if (!e.fault_drops) {
    CHECK(summary.find("membership_changes")->items().empty());
    CHECK_FALSE(it::contains(it::read_file(run / "logs/scheduler.log"), "failed"));
    CHECK_FALSE(it::fs::exists(run / "failures.jsonl"));
  }
  if (c.fault == Fault::kStopPastTimeout) {
    // Fenced by the launcher, or woken first and gone by itself, naming why.
    const std::string node = c.role + " " + std::to_string(c.victim);
    const std::string log = it::read_file(run / "logs" / (c.role + "-" + std::to_string(c.victim) + ".log"));
    CHECK((it::contains(output, it::fenced_line(node, victim_pid)) || it::contains(log, "dropped") ||
           it::contains(log, "failed")));
  }
  CHECK(it::fs::exists(run / "weights.bin"));
  sweep::check_nothing_left(run, {victim_pid});
}

void run_case(const Case& c) {
  CAPTURE(c.label);
  it::TempDir dir;
  const auto run = dir.path() / "run";
  const int steps = c.epochs * steps_per_epoch(c.workers);
  std::mt19937 rng(c.seed);
  // The watched worker's step records before the fault: 2 .. a third of its steps.
  int fault_after = 2 + static_cast<int>(rng() % static_cast<unsigned>(std::max(1, steps / 3 - 1)));
  if (c.epoch_end) fault_after = steps_per_epoch(c.workers) * (1 + static_cast<int>(rng() % static_cast<unsigned>(std::max(1, c.epochs / 3))));
  const int watched = c.role == "worker" ? c.victim : 0;
  it::note("sweep " + std::string(c.label) + ": " + c.mode + ", " + std::to_string(c.workers) + " workers, " +
           fault_name(c.fault) + " of " + c.role + " " + std::to_string(c.victim) + " after worker " +
           std::to_string(watched) + "'s step record " + std::to_string(fault_after) + " (seed " +
           std::to_string(c.seed) + ")");
  it::LaunchProcess launch(job_args(c, run), dir.path() / "out.txt");
  const auto metrics = sweep::worker_metrics(run, watched);
  const bool reached = it::wait_until([&] { return sweep::step_records(metrics) >= fault_after; },
                                      std::chrono::seconds(120), "the step records before the fault");
  INFO(launch.output());
  REQUIRE(reached);
  const std::string name = c.role + "-" + std::to_string(c.victim);
  const auto pids = it::read_pids(run);
  REQUIRE(pids.count(name) == 1);
  const pid_t victim_pid = pids.at(name);
  // The epoch the fault comes in: the watched worker's latest step record's (or a later one).
  std::int64_t fault_epoch = 0;
  for (const JsonValue& line : sweep::json_lines(metrics)) {
    if (sweep::type_of(line) == "step") fault_epoch = sweep::integer(line, "epoch");
  }
  const auto fault_at = std::chrono::steady_clock::now();
  apply_fault(c, run, victim_pid, launch);

  const auto exit = launch.wait(std::chrono::seconds(180));
  const double after_fault_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - fault_at).count();
  it::note("sweep " + std::string(c.label) + ": the job ended " + std::to_string(after_fault_s) + " s after the fault");
  const std::string output = launch.output();
  INFO(output);
  REQUIRE(exit.has_value());
  CHECK_FALSE(exit->signaled);
  REQUIRE(exit->code == 0);
  if (c.epoch_end) CHECK(after_fault_s < 60.0);  // not cluster.timeout_ms (90 s)
  check_job(c, run, output, fault_epoch, victim_pid);
}

// Workers 1, 2, 4, 8 over the four modes, one fault each; every seed different.
// min_accuracy: the same runs without a fault reach 0.95 or more (measured on the
// loaded 2-core machine); a run that stopped learning stays near 0.1.
const std::vector<Case> kCases = {
    // kill -9 of a worker mid-step
    {"kill-sync-1w-restart", "sync", 1, "restart", Fault::kKill9, "worker", 0, 101, 3, 0.8},
    {"kill-async-2w-restart", "async", 2, "restart", Fault::kKill9, "worker", 1, 102, 6, 0.8},
    {"kill-sync-4w-continue", "sync", 4, "continue", Fault::kKill9, "worker", 2, 103, 6, 0.8},
    {"kill-ssp-4w-restart", "ssp", 4, "restart", Fault::kKill9, "worker", 3, 104, 6, 0.8, {"ps.staleness_bound=1"}},
    // 40 epochs (4 steps each): the drop comes before the survivors have begun them all (12 were
    // all begun within the 0.8 s the drop took once).
    {"kill-async-8w-continue", "async", 8, "continue", Fault::kKill9, "worker", 5, 105, 40, 0.8},
    {"kill-allreduce-8w-continue", "allreduce", 8, "continue", Fault::kKill9, "worker", 6, 106, 12, 0.8, {}, true},
    {"kill-allreduce-4w-continue", "allreduce", 4, "continue", Fault::kKill9, "worker", 1, 107, 6, 0.8},
    // SIGSTOP past the heartbeat timeout, then SIGCONT
    {"stop-sync-4w-continue", "sync", 4, "continue", Fault::kStopPastTimeout, "worker", 1, 201, 6, 0.8},
    {"stop-ssp-8w-restart", "ssp", 8, "restart", Fault::kStopPastTimeout, "worker", 4, 202, 12, 0.8,
     {"ps.staleness_bound=2"}},
    {"stop-allreduce-2w-continue", "allreduce", 2, "continue", Fault::kStopPastTimeout, "worker", 1, 203, 3, 0.8},
    {"stop-server-sync-2w-restart", "sync", 2, "restart", Fault::kStopPastTimeout, "server", 1, 204, 6, 0.8},
    {"stop-server-async-4w-restart", "async", 4, "restart", Fault::kStopPastTimeout, "server", 0, 205, 6, 0.8},
    // SIGSTOP shorter than the heartbeat timeout: the job goes on, nobody dropped
    {"pause-ssp-8w", "ssp", 8, "", Fault::kStopShort, "worker", 7, 301, 12, 0.8, {"ps.staleness_bound=1"}},
    {"pause-server-sync-4w", "sync", 4, "", Fault::kStopShort, "server", 0, 302, 6, 0.8},
    {"pause-allreduce-4w", "allreduce", 4, "", Fault::kStopShort, "worker", 2, 303, 6, 0.8},
    {"pause-async-1w", "async", 1, "", Fault::kStopShort, "worker", 0, 304, 3, 0.8},
    // ssp with a 4x straggler, 4 and 8 workers: the bound holds (clock gap, staleness records)
    {"straggler-ssp-4w-bound0", "ssp", 4, "", Fault::kStraggler, "worker", 2, 401, 6, 0.8, {"ps.staleness_bound=0"}},
    // 0.5: with a 4x straggler at bound 2 (staleness up to 21 updates) 12 epochs (48 steps) ended
    // anywhere from 0.23 to 1.0 (ssp's order of updates varies from run to run); 30 epochs reached
    // 0.996-1.0 in 8 of 8 runs; then one run of the full suite diverged (0.098) at the sweeps'
    // async/ssp rate (0.025): this row trains at 0.01 (3 of 3 runs passed).
    {"straggler-ssp-8w-bound2", "ssp", 8, "", Fault::kStraggler, "worker", 5, 402, 30, 0.5,
     {"ps.staleness_bound=2", "optimizer.lr=0.01"}},
    // Allreduce under "restart": the replacement rejoins and the collective is back to full size
    // before the last epoch (check_job). 30 epochs: a rejoin heard of by nobody before the last
    // epoch's end is told "end" (docs/architecture.md section 5), and with 6 the lone survivor of
    // 2 workers finished the job (0.7 s) before the replacement had started (1 of 3 runs).
    {"kill-allreduce-2w-restart", "allreduce", 2, "restart", Fault::kKill9, "worker", 1, 111, 30, 0.8},
    {"kill-allreduce-4w-restart", "allreduce", 4, "restart", Fault::kKill9, "worker", 2, 112, 30, 0.8},
    {"kill-allreduce-8w-restart", "allreduce", 8, "restart", Fault::kKill9, "worker", 5, 113, 24, 0.8},
    // A second seed for the kill rows (workload.seed orders each epoch's samples and picks the step).
    {"kill-sync-4w-continue-seed2", "sync", 4, "continue", Fault::kKill9, "worker", 0, 123, 6, 0.8},
    {"kill-async-2w-restart-seed2", "async", 2, "restart", Fault::kKill9, "worker", 0, 122, 6, 0.8},
    {"kill-ssp-4w-restart-seed2", "ssp", 4, "restart", Fault::kKill9, "worker", 1, 124, 6, 0.8, {"ps.staleness_bound=1"}},
    {"kill-allreduce-4w-continue-seed2", "allreduce", 4, "continue", Fault::kKill9, "worker", 3, 127, 6, 0.8},
    // Fast compute (simulated, 0.05 ms a step: the races that the real compute's milliseconds hide),
    // kill -9 in each PS mode, two seeds each; 40 epochs, so that the fault comes mid-run.
    {"fast-kill-sync-4w-continue", "sync", 4, "continue", Fault::kKill9, "worker", 1, 131, 40, kSimulated, kFast},
    {"fast-kill-sync-4w-continue-seed2", "sync", 4, "continue", Fault::kKill9, "worker", 2, 132, 40, kSimulated, kFast},
    {"fast-kill-async-2w-restart", "async", 2, "restart", Fault::kKill9, "worker", 1, 133, 40, kSimulated, kFast},
    {"fast-kill-async-2w-restart-seed2", "async", 2, "restart", Fault::kKill9, "worker", 0, 134, 40, kSimulated, kFast},
    {"fast-kill-ssp-4w-continue", "ssp", 4, "continue", Fault::kKill9, "worker", 3, 135, 40, kSimulated,
     {"workload.simulated_step_ms=0.05", "ps.staleness_bound=1"}},
    {"fast-kill-ssp-4w-continue-seed2", "ssp", 4, "continue", Fault::kKill9, "worker", 0, 136, 40, kSimulated,
     {"workload.simulated_step_ms=0.05", "ps.staleness_bound=1"}},
};

const Case& case_named(const std::string& label) {
  for (const Case& c : kCases) {
    if (label == c.label) return c;
  }
  throw std::runtime_error("no sweep case " + label);
}

}  // namespace

// One test case per row, so a failed REQUIRE in one leaves the others to run.
#define SWEEP_CASE(label) \
  TEST_CASE("sweep " label) { run_case(case_named(label)); }

SWEEP_CASE("kill-sync-1w-restart")
SWEEP_CASE("kill-async-2w-restart")
SWEEP_CASE("kill-sync-4w-continue")
SWEEP_CASE("kill-ssp-4w-restart")
SWEEP_CASE("kill-async-8w-continue")
SWEEP_CASE("kill-allreduce-8w-continue")
SWEEP_CASE("kill-allreduce-4w-continue")
SWEEP_CASE("stop-sync-4w-continue")
SWEEP_CASE("stop-ssp-8w-restart")
SWEEP_CASE("stop-allreduce-2w-continue")
SWEEP_CASE("stop-server-sync-2w-restart")
SWEEP_CASE("stop-server-async-4w-restart")
SWEEP_CASE("pause-ssp-8w")
SWEEP_CASE("pause-server-sync-4w")
SWEEP_CASE("pause-allreduce-4w")
SWEEP_CASE("pause-async-1w")
SWEEP_CASE("straggler-ssp-4w-bound0")
SWEEP_CASE("straggler-ssp-8w-bound2")
SWEEP_CASE("kill-allreduce-2w-restart")
SWEEP_CASE("kill-allreduce-4w-restart")
SWEEP_CASE("kill-allreduce-8w-restart")
SWEEP_CASE("kill-sync-4w-continue-seed2")
SWEEP_CASE("kill-async-2w-restart-seed2")
SWEEP_CASE("kill-ssp-4w-restart-seed2")
SWEEP_CASE("kill-allreduce-4w-continue-seed2")
SWEEP_CASE("fast-kill-sync-4w-continue")
SWEEP_CASE("fast-kill-sync-4w-continue-seed2")
SWEEP_CASE("fast-kill-async-2w-restart")
SWEEP_CASE("fast-kill-async-2w-restart-seed2")
SWEEP_CASE("fast-kill-ssp-4w-continue")
SWEEP_CASE("fast-kill-ssp-4w-continue-seed2")

// Allreduce, 8 workers: worker 6 killed in the replica check that ends an
// epoch. It is stopped right after its record of the epoch's last step; if the
// check then holds (worker 0's evaluation of the epoch, which comes after the
// check, does not come; a stop that missed the check is undone and tried at the
// next epoch's end), it is killed there. Its ring neighbours fail at once, the
// other 5 wait in the check; the launcher reports the exit and the scheduler
// drops it at once, and they must re-form then, not when the check's operation
// times out (cluster.timeout_ms, 90 s here). Before, the check was a blocking
// allreduce that no drop ended: they sat in it for timeout_ms, and the
// neighbours, which re-formed at once, gave up the new generation's rendezvous
// (also timeout_ms) just before the others came (the job hung).
TEST_CASE("sweep: allreduce, 8 workers, a worker killed in an epoch's replica check: the others re-form at once") {
  using namespace std::chrono_literals;
  constexpr int kWorkers = 8, kVictim = 6, kEpochs = 12;
  it::TempDir dir;
  const auto run = dir.path() / "run";
  auto args = it::launch_args(it::kSourceDir / "configs/tiny_allreduce.toml", run);
  args.insert(args.end(), {"--set", "cluster.workers=8", "--set", "cluster.on_worker_failure=continue", "--set",
                           "cluster.heartbeat_timeout_ms=4000", "--set", "cluster.timeout_ms=90000", "--set",
                           "workload.epochs=12", "--set", "workload.seed=501", "--set", "output.trace=off", "--quiet"});
  it::LaunchProcess launch(args, dir.path() / "out.txt");
  const auto victim_metrics = sweep::worker_metrics(run, kVictim);
  // Worker 0's evaluations so far, by its log's lines ("epoch E: test loss ..."; its metrics file
  // holds its eval record back until its next step record).
  const auto evals = [&] {
    const std::string text = it::read_file(run / "logs/worker-0.log");
    int n = 0;
    for (auto at = text.find(": test loss "); at != std::string::npos; at = text.find(": test loss ", at + 1)) ++n;
    return n;
  };
  pid_t victim = -1;
  bool in_check = false;
  for (int epoch = 1; epoch < kEpochs - 2 && !in_check; ++epoch) {
    const int records = epoch * steps_per_epoch(kWorkers);  // the epoch's last step recorded
    REQUIRE(it::wait_until([&] { return sweep::step_records(victim_metrics) >= records - 1; }, 120s,
                           "worker 6's step records"));
    // Polled tightly (the check takes milliseconds): the stop must come before it completes.
    while (sweep::step_records(victim_metrics) < records) std::this_thread::sleep_for(std::chrono::microseconds(200));
    if (victim < 0) victim = it::read_pids(run).at("worker-" + std::to_string(kVictim));
    REQUIRE(kill(victim, SIGSTOP) == 0);
    // The check held: no evaluation of this epoch within 3 s (the leader evaluates in
    // milliseconds once the check is done). Else it had completed: wake the worker, try again.
    in_check = !it::wait_until([&] { return evals() >= epoch; }, 3s, "worker 0's evaluation (none: the check holds)");
    if (!in_check) REQUIRE(kill(victim, SIGCONT) == 0);
  }
  INFO(launch.output());
  REQUIRE(in_check);
  // Killed there (a SIGCONT would let it finish the check with the others): its ring neighbours'
  // connections to it close at once, the others keep waiting in the check.
  REQUIRE(kill(victim, SIGKILL) == 0);
  const auto killed_at = std::chrono::steady_clock::now();
  const auto exit = launch.wait(180s);
  const double after_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count();
  it::note("allreduce replica check: the job ended " + std::to_string(after_s) + " s after worker 6 was killed in it");
  const std::string output = launch.output();
  INFO(output);
  REQUIRE(exit.has_value());
  CHECK(exit->code == 0);
  CHECK(after_s < 60.0);  // the remaining epochs take seconds; timeout_ms is 90 s
  const JsonValue summary = sweep::read_summary(run);
  CHECK(sweep::int_set(*summary.find("dropped_workers")) == std::set<std::int64_t>{kVictim});
  for (int w = 0; w < kWorkers; ++w) {
    if (w == kVictim) continue;
    CAPTURE(w);
    const std::string log = it::read_file(run / "logs" / ("worker-" + std::to_string(w) + ".log"));
    const std::size_t failed = log.find("the collective failed: ");
    if (failed != std::string::npos) it::note("worker " + std::to_string(w) + ": " + log.substr(failed, log.find('\n', failed) - failed));
    CHECK(it::contains(log, "re-formed the collective without the dropped worker(s): 7 workers"));
  }
  const auto samples = sweep::samples_per_epoch(run, kWorkers);
  CHECK(samples.rbegin()->second == epoch_images(kWorkers - 1));
  CHECK(summary.find("final_test_accuracy")->as_number("a") >= 0.8);
  sweep::check_nothing_left(run, {victim});
}
