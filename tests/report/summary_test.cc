// The run summary: each headline figure of docs/run_directory.md from known
// metrics, summary.json read back, summary.md's tables, and the whole
// write_run_summary() on a run directory.
#include <doctest/doctest.h>

#include <cmath>

#include "common/config/config.h"
#include "common/base/errors.h"
#include "tests/report/report_test_util.h"
#include "tools/report/json_value.h"
#include "tools/report/summary.h"

using namespace pstrain::report;
using pstrain::Mode;
using pstrain::RunConfig;
using pstrain::WorkerFailurePolicy;
using report_test::TempDir;

namespace {

WorkerMetrics worker(int rank, double time_s, std::int64_t images) {
  WorkerMetrics w;
  w.rank = rank;
  w.end = EndRecord{time_s, 10, images, 1.0 + rank, 0.5, 0.25};
  return w;
}

RunMetrics two_workers() {
  RunMetrics m;
  m.workers = {worker(0, 4.0, 400), worker(1, 5.0, 600)};
  m.workers[0].evals = {EvalRecord{1.0, 10, 0, 0.9, 0.5}, EvalRecord{2.0, 20, 1, 0.6, 0.799999999},
                        EvalRecord{3.0, 30, 2, 0.5, 0.86}, EvalRecord{4.0, 40, 3, 0.5, 0.84}};
  return m;
}

RunConfig config(Mode mode) {
  RunConfig c;
  c.mode = mode;
  c.cluster.num_servers = 2;
  c.cluster.num_workers = 2;
  c.workload.model = "small_cnn";
  c.workload.dataset = "synthetic";
  return c;
}

ServerMetrics server(int rank, std::map<std::int64_t, std::int64_t> histogram) {
  ServerMetrics s;
  s.rank = rank;
  s.staleness_histogram = std::move(histogram);
  return s;
}

}  // namespace

TEST_CASE("summarize computes the headline figures") {
  const RunSummary s = summarize(config(Mode::kSync), two_workers());
  CHECK(s.mode == "sync");
  CHECK(s.workers == 2);
  CHECK(s.servers == 2);
  CHECK(s.model == "small_cnn");
  CHECK(s.dataset == "synthetic");
  CHECK(s.wall_time_s == 5.0);                           // the slowest worker
  CHECK(s.global_images_per_s == doctest::Approx(200));  // (400 + 600) / 5
  REQUIRE(s.final_test_accuracy.has_value());
  CHECK(*s.final_test_accuracy == doctest::Approx(0.84));  // the last evaluation, not the best
  REQUIRE(s.time_to_accuracy.size() == 3);
  CHECK(s.time_to_accuracy[0].threshold == "0.80");
  CHECK(s.time_to_accuracy[0].time_s == 2.0);  // 0.799999999 counts: 9-digit rounding of 0.8
  CHECK(s.time_to_accuracy[1].time_s == 3.0);
  CHECK_FALSE(s.time_to_accuracy[2].time_s.has_value());
  REQUIRE(s.per_worker.size() == 2);
  CHECK(s.per_worker[1].rank == 1);
  CHECK(s.per_worker[1].images_per_s == doctest::Approx(120));
  CHECK(s.per_worker[1].compute_s == 2.0);
  CHECK_FALSE(s.staleness.has_value());  // sync
}

TEST_CASE("async runs sum the servers' staleness histograms") {
  RunMetrics m = two_workers();
  m.servers = {server(0, {{0, 6}, {1, 2}, {5, 0}}), server(1, {{0, 2}, {3, 2}})};
  const RunSummary s = summarize(config(Mode::kAsync), m);
  REQUIRE(s.staleness.has_value());
  CHECK(s.staleness->histogram == std::map<std::int64_t, std::int64_t>{{0, 8}, {1, 2}, {3, 2}, {5, 0}});
  CHECK(*s.staleness->mean == doctest::Approx((2.0 + 6.0) / 12.0));
  CHECK(*s.staleness->max == 3);  // a key with count 0 is not a staleness seen

  m.servers = {server(0, {}), server(1, {})};
  const RunSummary empty = summarize(config(Mode::kAsync), m);
  CHECK_FALSE(empty.staleness->mean.has_value());
  CHECK_FALSE(empty.staleness->max.has_value());
}

TEST_CASE("ssp runs record the bound, the largest clock gap and the mean time blocked") {
  RunMetrics m = two_workers();
  m.servers = {server(0, {{0, 4}, {1, 4}}), server(1, {{2, 1}})};
  m.servers[0].clock_gap_max = 2;
  m.servers[1].clock_gap_max = 3;
  m.workers[0].end->blocked_s = 1.5;
  m.workers[1].end->blocked_s = 0.5;
  RunConfig c = config(Mode::kSsp);
  c.ps.staleness_bound = 3;
  const RunSummary s = summarize(c, m);
  REQUIRE(s.ssp.has_value());
  CHECK(s.ssp->staleness_bound == 3);
  CHECK(s.ssp->clock_gap_max == 3);
  CHECK(s.ssp->blocked_s_mean == doctest::Approx(1.0));
  REQUIRE(s.staleness.has_value());  // pushes are stale in ssp too
  CHECK(*s.staleness->max == 2);
  const JsonValue j = parse_json(summary_json(s), "summary.json");
  CHECK(j.find("ssp")->find("clock_gap_max")->as_integer("g") == 3);
  CHECK(j.find("per_worker")->items().at(0).find("blocked_s")->as_number("b") == 1.5);
  const std::string md = summary_markdown(s, "runs/ssp");
  CHECK(md.find("| 3 | 3 | 1.00 |") != std::string::npos);
  CHECK_FALSE(summarize(config(Mode::kAsync), m).ssp.has_value());
}

TEST_CASE("allreduce runs have no servers; runs without evaluations have no accuracy") {
  RunMetrics m = two_workers();
  m.workers[0].evals.clear();
  const RunSummary s = summarize(config(Mode::kAllreduce), m);
  CHECK(s.servers == 0);
  CHECK_FALSE(s.final_test_accuracy.has_value());
  CHECK_FALSE(s.time_to_accuracy[0].time_s.has_value());
}

TEST_CASE("a worker without its end record cannot be summarized") {
  RunMetrics m = two_workers();
  m.workers[1].end.reset();
  CHECK_THROWS_WITH_AS(summarize(config(Mode::kSync), m), "worker 1 has no \"end\" record", pstrain::DataError);
}

TEST_CASE("under on_worker_failure = continue a worker without its end record is a dropped worker") {
  RunMetrics m = two_workers();
  m.workers[1].end.reset();
  m.workers[1].steps.clear();
  for (int i = 0; i < 3; ++i) {
    StepRecord r;
    r.time_s = 0.5 * (i + 1);
    r.step = i;
    r.batch = 32;
    r.compute_ms = 100;
    m.workers[1].steps.push_back(r);
  }
  m.servers = {server(0, {}), server(1, {})};
  m.servers[0].partial_updates = 5;
  m.servers[1].partial_updates = 2;
  RunConfig c = config(Mode::kSync);
  c.cluster.on_worker_failure = WorkerFailurePolicy::kContinue;
  const RunSummary s = summarize(c, m);
  CHECK(s.dropped_workers == std::vector<int>{1});
  CHECK(s.partial_updates == 7);
  REQUIRE(s.per_worker.size() == 2);
  CHECK(s.per_worker[1].dropped);
  CHECK_FALSE(s.per_worker[0].dropped);
  CHECK(s.per_worker[1].images == 96);  // what its step records say it trained before it was lost
  CHECK(s.per_worker[1].time_s == 1.5);
  CHECK(s.per_worker[1].compute_s == doctest::Approx(0.3));
  const JsonValue j = parse_json(summary_json(s), "summary.json");
  CHECK(j.find("dropped_workers")->items().at(0).as_integer("r") == 1);
  CHECK(j.find("partial_updates")->as_integer("p") == 7);
  CHECK(j.find("per_worker")->items().at(1).find("dropped")->as_bool("d"));
  CHECK(summary_markdown(s, "runs/x").find("Workers dropped (cluster.on_worker_failure = \"continue\"): 1") !=
        std::string::npos);
}

TEST_CASE("summary.json holds every documented key and reads back") {
  RunMetrics m = two_workers();
  m.servers = {server(0, {{0, 3}, {2, 1}}), server(1, {})};
  const JsonValue j = parse_json(summary_json(summarize(config(Mode::kAsync), m)), "summary.json");
  for (const char* key : {"mode", "workers", "servers", "model", "dataset", "compute", "final_test_accuracy",
                          "wall_time_s",
                          "time_to_accuracy", "global_images_per_s", "per_worker", "staleness", "ssp",
                          "dropped_workers", "restarts", "resumed_from", "membership_changes", "abandoned_joins",
                          "partial_updates", "server_restarts",
                          "skipped_steps",
                          "resources", "partial", "partial_reason", "warnings"}) {
    CAPTURE(key);
    CHECK(j.find(key) != nullptr);
  }
  CHECK(j.keys().size() == 25);
  CHECK(j.find("ssp")->is_null());
  CHECK(j.find("mode")->as_string("mode") == "async");
  CHECK(j.find("final_test_accuracy")->as_number("a") == doctest::Approx(0.84));
  CHECK(j.find("time_to_accuracy")->find("0.85")->as_number("t") == 3.0);
  CHECK(j.find("time_to_accuracy")->find("0.90")->is_null());
  const JsonValue& w1 = j.find("per_worker")->items().at(1);
  for (const char* key : {"rank", "time_s", "images", "compute_s", "pull_s", "push_s", "blocked_s", "images_per_s",
                          "skipped_steps", "steps_done"}) {
    CAPTURE(key);
    CHECK(w1.find(key) != nullptr);
  }
  CHECK(w1.find("images")->as_integer("images") == 600);
  const JsonValue& st = *j.find("staleness");
  CHECK(st.find("mean")->as_number("mean") == doctest::Approx(0.5));
  CHECK(st.find("max")->as_integer("max") == 2);
  CHECK(st.find("histogram")->find("2")->as_integer("h") == 1);

  const JsonValue sync = parse_json(summary_json(summarize(config(Mode::kSync), m)), "summary.json");
  CHECK(sync.find("staleness")->is_null());
}

TEST_CASE("summary.md has the headline and per-worker tables with units") {
  RunMetrics m = two_workers();
  m.servers = {server(0, {{0, 3}, {2, 1}}), server(1, {})};
  const std::string md = summary_markdown(summarize(config(Mode::kAsync), m), "runs/x");
  CHECK(md.find("# Run summary: runs/x") != std::string::npos);
  CHECK(md.find("| mode | servers | workers | model | dataset | final test accuracy (%) | training wall time (s) | "
                "throughput (images/s) |") != std::string::npos);
  CHECK(md.find("| async | 2 | 2 | small_cnn | synthetic | 84.00 | 5.00 | 200.0 |") != std::string::npos);
  CHECK(md.find("| time to 80% (s) | time to 85% (s) | time to 90% (s) |") != std::string::npos);
  CHECK(md.find("| 2.00 | 3.00 | n/a |") != std::string::npos);
  CHECK(md.find("| 0.50 | 2 | 0: 3, 2: 1 |") != std::string::npos);
  CHECK(md.find("| worker | status | time (s) | images | throughput (images/s) | compute (s) | pull (s) | push (s) |") !=
        std::string::npos);
  CHECK(md.find("| 1 | done | 5.00 | 600 | 120.0 | 2.00 | 0.50 | 0.25 |") != std::string::npos);
  CHECK(summary_markdown(summarize(config(Mode::kSync), m), "r").find("Staleness") == std::string::npos);
}

TEST_CASE("summary.md labels allreduce workers' times as update and allreduce wait, not pull and push") {
  const std::string md = summary_markdown(summarize(config(Mode::kAllreduce), two_workers()), "runs/x");
  CHECK(md.find("| worker | status | time (s) | images | throughput (images/s) | compute (s) | update (s) | "
                "allreduce wait (s) |") != std::string::npos);
  CHECK(md.find("pull (s)") == std::string::npos);
  CHECK(md.find("push (s)") == std::string::npos);
}

TEST_CASE("write_run_summary reads a run directory and writes both files") {
  TempDir dir;
  RunConfig c = config(Mode::kSync);
  c.cluster.num_servers = 1;
  report_test::write_file(dir.path() / "config.toml", pstrain::to_toml(c));
  CHECK_THROWS_AS(write_run_summary(dir.path()), pstrain::DataError);  // no metrics yet
  report_test::write_file(worker_metrics_path(dir.path(), 0),
                          report_test::step_line(0, 0.1, 2.0) + report_test::eval_line(1, 0.5, 0.9) +
                              report_test::end_line(1.0, 1, 32));
  report_test::write_file(worker_metrics_path(dir.path(), 1), report_test::end_line(2.0, 1, 32));
  report_test::write_file(server_metrics_path(dir.path(), 0),
                          R"({"rank": 0, "updates": 1, "pushes_accepted": 2, "pushes_rejected": 0, "staleness_histogram": {}})");
  const RunSummary s = write_run_summary(dir.path());
  CHECK(s.wall_time_s == 2.0);
  const JsonValue j = parse_json(report_test::read_file(dir.path() / "summary.json"), "summary.json");
  CHECK(j.find("final_test_accuracy")->as_number("a") == doctest::Approx(0.9));
  CHECK(j.find("global_images_per_s")->as_number("g") == doctest::Approx(32.0));
  CHECK(report_test::read_file(dir.path() / "summary.md").find("| 1 | done | 2.00 | 32 | 16.0 |") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(dir.path() / "summary.json.tmp"));
}

TEST_CASE("skipped steps (on_nonfinite \"skip\"): per worker from its end record, or its step records if dropped") {
  RunMetrics m = two_workers();
  m.workers[0].end->skipped_steps = 4;
  m.workers[1].end.reset();
  for (int i = 0; i < 3; ++i) {
    StepRecord r;
    r.time_s = 0.5 * (i + 1);
    r.step = i;
    r.batch = 32;
    r.skipped = i > 0;
    m.workers[1].steps.push_back(r);
  }
  RunConfig c = config(Mode::kSync);
  c.cluster.on_worker_failure = WorkerFailurePolicy::kContinue;
  const RunSummary s = summarize(c, m);
  REQUIRE(s.per_worker.size() == 2);
  CHECK(s.per_worker[0].skipped_steps == 4);
  CHECK(s.per_worker[1].skipped_steps == 2);
  CHECK(s.skipped_steps == 6);
  const JsonValue j = parse_json(summary_json(s), "summary.json");
  CHECK(j.find("skipped_steps")->as_integer("s") == 6);
  CHECK(j.find("per_worker")->items().at(0).find("skipped_steps")->as_integer("s") == 4);
  CHECK(summary_markdown(s, "runs/x").find("## Skipped steps") != std::string::npos);
  CHECK(summary_markdown(s, "runs/x").find(": 6 (worker 0: 4, worker 1: 2).") != std::string::npos);
  CHECK(summary_markdown(summarize(config(Mode::kSync), two_workers()), "r").find("Skipped") == std::string::npos);
}

TEST_CASE("a server that rejoined: the summary says which shard lost how many updates") {
  RunMetrics m = two_workers();
  m.servers = {server(0, {}), server(1, {})};
  m.servers[1].rejoined_from_step = 8;
  m.servers[1].lost_updates = 6;
  m.servers[1].lost_pushes = 1;
  const RunSummary s = summarize(config(Mode::kSync), m);
  REQUIRE(s.server_restarts.size() == 1);
  CHECK(s.server_restarts[0].rank == 1);
  const JsonValue j = parse_json(summary_json(s), "summary.json");
  const JsonValue& restarts = *j.find("server_restarts");
  REQUIRE(restarts.items().size() == 1);
  CHECK(restarts.items()[0].find("server")->as_integer("server") == 1);
  CHECK(restarts.items()[0].find("from_step")->as_integer("from_step") == 8);
  CHECK(restarts.items()[0].find("lost_updates")->as_integer("lost_updates") == 6);
  CHECK(restarts.items()[0].find("lost_pushes")->as_integer("lost_pushes") == 1);
  const std::string md = summary_markdown(s, "runs/x");
  CHECK(md.find("Server 1 failed and rejoined from the checkpoint at step 8") != std::string::npos);
  CHECK(md.find("6 chunk updates of its shard were lost") != std::string::npos);
  // Before the first checkpoint it came back from its initial weights, and says so.
  m.servers[1].rejoined_from_step = 0;
  const std::string early = summary_markdown(summarize(config(Mode::kSync), m), "runs/x");
  CHECK(early.find("Server 1 failed and rejoined from its initial weights (it failed before the first checkpoint") !=
        std::string::npos);
  // A run without a restart says nothing about it.
  m.servers[1].rejoined_from_step = -1;
  CHECK(summarize(config(Mode::kSync), m).server_restarts.empty());
}

TEST_CASE("restart: each rejoin record is a restart in the summary (rank, time, step); the worker counts as finished") {
  RunMetrics m = two_workers();
  m.workers[1].rejoins = {RejoinRecord{4.5, 12}};
  RunConfig c = config(Mode::kSync);
  c.cluster.on_worker_failure = WorkerFailurePolicy::kRestart;
  const RunSummary s = summarize(c, m);
  REQUIRE(s.restarts.size() == 1);
  CHECK(s.restarts[0].rank == 1);
  CHECK(s.restarts[0].time_s == 4.5);
  CHECK(s.restarts[0].step == 12);
  CHECK(s.dropped_workers.empty());
  const JsonValue j = parse_json(summary_json(s), "summary.json");
  const JsonValue& r = j.find("restarts")->items().at(0);
  CHECK(r.find("step")->as_number("step") == 12.0);
  CHECK(summary_markdown(s, "run").find("worker 1 rejoined at step 12, 4.5 s into the job") != std::string::npos);
}

TEST_CASE("restart: a new process told to leave (its rank retired while it was down) is retired, its predecessor's images counted") {
  RunMetrics m = two_workers();
  for (int i = 0; i < 3; ++i) {  // the first process's steps
    StepRecord r;
    r.time_s = 0.5 * (i + 1);
    r.step = i;
    r.batch = 32;
    m.workers[1].steps.push_back(r);
  }
  m.workers[1].rejoins = {RejoinRecord{2.5, -1, 3, 1}};
  m.workers[1].end = EndRecord{};
  m.workers[1].end->retired = true;
  m.workers[1].end->time_s = 2.5;
  RunConfig c = config(Mode::kSync);
  c.cluster.on_worker_failure = WorkerFailurePolicy::kRestart;
  const RunSummary s = summarize(c, m);
  REQUIRE(s.per_worker.size() == 2);
  CHECK(s.per_worker[1].status == "retired");
  CHECK(s.per_worker[1].images == 96);  // its first process's 3 steps; the second trained none
  REQUIRE(s.restarts.size() == 1);
  CHECK(s.restarts[0].retired_by_change == 1);
  const JsonValue j = parse_json(summary_json(s), "summary.json");
  const JsonValue& r = j.find("restarts")->items().at(0);
  CHECK(r.find("step")->is_null());
  CHECK(r.find("retired_by_change")->as_integer("retired_by_change") == 1);
  CHECK(j.find("per_worker")->items().at(1).find("status")->as_string("status") == "retired");
  const std::string md = summary_markdown(s, "run");
  CHECK(md.find("worker 1's new process left at once, 2.5 s into the job: membership change 1 had retired the rank "
                "while it was down") != std::string::npos);
  // A request for fewer workers, with no change: said so.
  m.workers[1].rejoins[0].retired_by_change = -1;
  CHECK(summary_markdown(summarize(c, m), "run").find("a request for fewer workers had retired the rank") !=
        std::string::npos);
}

TEST_CASE("membership changes: from the plan records of the lowest worker that finished, with their reasons") {
  RunMetrics m = two_workers();
  m.workers.push_back(worker(2, 5.0, 600));
  m.workers[1].end.reset();  // dropped: it saw none of the later changes
  m.workers[1].plan_changes = {PlanChange{1, -1, 2}};
  // Worker 0: worker 1 dropped from epoch 1 (first step 16), back from epoch 2; a join within epoch 3, a retirement after.
  m.workers[0].plan_changes = {PlanChange{1, -1, 2}, PlanChange{2, -1, 3}, PlanChange{2, -1, 3}, PlanChange{3, 50, 4},
                               PlanChange{3, 55, 3}};
  for (const std::int64_t step : {15, 16, 17}) {
    StepRecord r;
    r.step = step;
    r.epoch = step >= 16 ? 1 : 0;
    m.workers[0].steps.push_back(r);
  }
  RunConfig c = config(Mode::kSync);
  c.cluster.num_workers = 3;
  c.cluster.on_worker_failure = WorkerFailurePolicy::kContinue;
  const RunSummary s = summarize(c, m);
  REQUIRE(s.membership_changes.size() == 4);
  CHECK(s.membership_changes[0].epoch == 1);
  CHECK(s.membership_changes[0].step == 16);
  CHECK(s.membership_changes[0].old_workers == 3);
  CHECK(s.membership_changes[0].new_workers == 2);
  CHECK(s.membership_changes[0].reason == "drop");
  CHECK(s.membership_changes[1].reason == "rejoin");
  CHECK(s.membership_changes[1].step == -1);  // no step record of epoch 2
  CHECK(s.membership_changes[2].step == 50);
  CHECK(s.membership_changes[2].reason == "join");
  CHECK(s.membership_changes[3].reason == "retire");
  CHECK(s.membership_changes[3].old_workers == 4);
  const JsonValue j = parse_json(summary_json(s), "summary.json");
  const JsonValue& first = j.find("membership_changes")->items().at(0);
  CHECK(first.find("step")->as_integer("s") == 16);
  CHECK(first.find("reason")->as_string("r") == "drop");
  CHECK(j.find("membership_changes")->items().at(1).find("step")->is_null());
  const std::string md = summary_markdown(s, "runs/x");
  CHECK(md.find("## Membership") != std::string::npos);
  CHECK(md.find("- epoch 1, step 16: 3 -> 2 workers (drop)") != std::string::npos);
  CHECK(md.find("- epoch 3, step 55: 4 -> 3 workers (retire)") != std::string::npos);
  CHECK(summarize(config(Mode::kSync), two_workers()).membership_changes.empty());
  // The plan record's own reason, when it has one: a grow requested with pstrain-ctl.
  RunMetrics grown = two_workers();
  grown.workers[0].plan_changes = {PlanChange{1, 20, 4, "ctl"}, PlanChange{2, 40, 3, "retire"},
                                   PlanChange{3, 60, 4, "join"}};
  const RunSummary g = summarize(config(Mode::kSync), grown);
  REQUIRE(g.membership_changes.size() == 3);
  CHECK(g.membership_changes[0].reason == "ctl");
  CHECK(g.membership_changes[0].old_workers == 2);
  CHECK(g.membership_changes[1].reason == "retire");
  CHECK(g.membership_changes[2].reason == "join");
  CHECK(summary_markdown(g, "runs/x").find("- epoch 1, step 20: 2 -> 4 workers (ctl)") != std::string::npos);
}

// A joiner killed before its boundary: the scheduler abandoned its join (its
// slot vacant again, the change went on 2 -> 2) and recorded it in
// metrics/scheduler.jsonl, which is the only place the run says so.
TEST_CASE("abandoned joins: the scheduler's records name the rank, time, change and reason in summary.json and .md") {
  TempDir dir;
  RunConfig c = config(Mode::kSync);
  c.cluster.num_servers = 1;
  c.cluster.min_workers = 2;
  c.cluster.max_workers = 3;
  report_test::write_file(dir.path() / "config.toml", pstrain::to_toml(c));
  report_test::write_file(worker_metrics_path(dir.path(), 0),
                          report_test::step_line(0, 0.1, 2.0) + report_test::end_line(1.0, 1, 32));
  report_test::write_file(worker_metrics_path(dir.path(), 1), report_test::end_line(2.0, 1, 32));
  // The joiner wrote its compute record only, then was killed.
  report_test::write_file(worker_metrics_path(dir.path(), 2),
                          "{\"type\":\"compute\",\"time_s\":0,\"backend\":\"cpu\",\"conv_path\":\"onednn\","
                          "\"conv_detail\":\"oneDNN\",\"precision\":\"fp32\"}\n");
  report_test::write_file(server_metrics_path(dir.path(), 0),
                          R"({"rank": 0, "updates": 1, "pushes_accepted": 2, "pushes_rejected": 0, "staleness_histogram": {}})");
  const std::string why = "worker 2 (h, pid 4242) was killed by signal 9 (Killed) (reported by the launcher)";
  report_test::write_file(dir.path() / "metrics" / "scheduler.jsonl",
                          "{\"type\":\"join_abandoned\",\"time_s\":12.5,\"rank\":2,\"change\":1,\"pid\":4242,"
                          "\"host\":\"h\",\"reason\":\"" + why + "\"}\n"
                          "{\"type\":\"join_abandoned\",\"time_s\":13,\"rank\":\"x\"}\n");  // malformed: left out
  const RunSummary s = write_run_summary(dir.path());
  REQUIRE(s.abandoned_joins.size() == 1);
  CHECK(s.membership_changes.empty());  // no worker's share changed
  const JsonValue j = parse_json(report_test::read_file(dir.path() / "summary.json"), "summary.json");
  REQUIRE(j.find("abandoned_joins")->items().size() == 1);
  const JsonValue& a = j.find("abandoned_joins")->items().at(0);
  CHECK(a.find("rank")->as_integer("rank") == 2);
  CHECK(a.find("change")->as_integer("change") == 1);
  CHECK(a.find("time_s")->as_number("time_s") == doctest::Approx(12.5));
  CHECK(a.find("reason")->as_string("reason") == why);
  CHECK(j.find("dropped_workers")->items().empty());
  const std::string md = report_test::read_file(dir.path() / "summary.md");
  CHECK(md.find("## Membership") != std::string::npos);
  CHECK(md.find("- worker 2 (join abandoned), 12.5 s into the job, membership change 1: " + why) != std::string::npos);
  // The warnings name the malformed line; "never entered the job" is said by the record instead.
  bool named = false;
  for (const std::string& w : s.warnings) {
    CHECK(w.find("never entered") == std::string::npos);
    named = named || w.find("scheduler.jsonl:2") != std::string::npos;
  }
  CHECK(named);
  // Without the scheduler's records (a run of an older build), the joiner is a warning as before.
  std::filesystem::remove(dir.path() / "metrics" / "scheduler.jsonl");
  const RunSummary old = write_run_summary(dir.path());
  CHECK(old.abandoned_joins.empty());
  REQUIRE(old.warnings.size() == 1);
  CHECK(old.warnings[0] == "worker 2 (a joiner) never entered the job");
  CHECK(report_test::read_file(dir.path() / "summary.md").find("## Membership") == std::string::npos);
}

TEST_CASE("compute: the lowest-ranked worker's backend, conv path and precision; null when no worker said") {
  RunMetrics m = two_workers();
  CHECK(parse_json(summary_json(summarize(config(Mode::kSync), m)), "summary.json").find("compute")->is_null());
  CHECK(summary_markdown(summarize(config(Mode::kSync), m), "r").find("Compute:") == std::string::npos);
  m.workers[1].compute = ComputeRecord{"cuda:1 (GPU B)", "cuda-im2col", "own conv kernels (built without cuDNN)", "fp32"};
  m.workers[0].compute = ComputeRecord{"cuda:0 (NVIDIA H200, sm_90, convolutions by cuDNN 9.14.0 (built with 9.19.0), "
                                       "tf32)", "cudnn", "convolutions by cuDNN 9.14.0 (built with 9.19.0)", "tf32"};
  const RunSummary s = summarize(config(Mode::kSync), m);
  const JsonValue j = parse_json(summary_json(s), "summary.json");
  const JsonValue* c = j.find("compute");
  REQUIRE(c != nullptr);
  CHECK(c->find("conv_path")->as_string("c") == "cudnn");
  CHECK(c->find("conv_detail")->as_string("c") == "convolutions by cuDNN 9.14.0 (built with 9.19.0)");
  CHECK(c->find("precision")->as_string("p") == "tf32");
  CHECK(c->find("backend")->as_string("b").starts_with("cuda:0 (NVIDIA H200"));
  CHECK(summary_markdown(s, "r").find("convolutions cudnn (convolutions by cuDNN 9.14.0 (built with 9.19.0)), "
                                      "precision tf32.") != std::string::npos);
}

TEST_CASE("a partial run: a worker dropped epochs before the interruption is dropped, the others interrupted") {
  // 3 workers under "continue": worker 2 died in epoch 0, workers 0 and 1 re-split the data from epoch 1
  // and were still training epoch 2 when the job was interrupted (no end records).
  RunMetrics m;
  for (int rank = 0; rank < 3; ++rank) {
    WorkerMetrics w;
    w.rank = rank;
    const std::int64_t epochs = rank == 2 ? 1 : 3;
    for (std::int64_t e = 0; e < epochs; ++e) {
      for (std::int64_t i = 0; i < 4; ++i) {
        StepRecord r;
        r.epoch = e;
        r.step = e * 4 + i;
        r.time_s = 0.1 * static_cast<double>(r.step + 1);
        r.batch = 8;
        w.steps.push_back(r);
      }
    }
    if (rank < 2) w.plan_changes = {PlanChange{0, -1, 3, ""}, PlanChange{1, -1, 2, ""}};
    m.workers.push_back(w);
  }
  RunConfig c = config(Mode::kSync);
  c.cluster.num_workers = 3;
  c.cluster.on_worker_failure = WorkerFailurePolicy::kContinue;
  const PartialRun partial{"interrupted by SIGINT"};
  const RunSummary s = summarize(c, m, &partial);
  REQUIRE(s.per_worker.size() == 3);
  CHECK(s.per_worker[0].status == "interrupted");
  CHECK(s.per_worker[1].status == "interrupted");
  CHECK(s.per_worker[2].status == "dropped");
  CHECK(s.dropped_workers == std::vector<int>{2});
  CHECK(s.wall_time_s == doctest::Approx(1.2));  // the interrupted workers' time; the dropped one's does not count
  // Without the others' re-split (a worker cut short in the same epoch as the rest) it is only interrupted.
  m.workers[0].plan_changes.resize(1);
  m.workers[1].plan_changes.resize(1);
  const RunSummary t = summarize(c, m, &partial);
  CHECK(t.per_worker[2].status == "interrupted");
  CHECK(t.dropped_workers.empty());
}
