// A rank's numbers across its processes (issue: the summary of a restarted
// run counted only the last process's images, a third too few): the end
// record of a rank taken back by a new process counts that process's work,
// the step records before its rejoin record its predecessors'; the summary
// adds them and marks the rank "restarted". A resumed run says from which
// checkpoint step. And the reader places a rejoin record among the steps.
#include <doctest/doctest.h>

#include "common/config/config.h"
#include "tests/report/report_test_util.h"
#include "tools/report/json_value.h"
#include "tools/report/metrics.h"
#include "tools/report/summary.h"

using namespace pstrain::report;

namespace {

StepRecord step(std::int64_t index, std::int64_t batch, double compute_ms) {
  StepRecord r;
  r.time_s = 0.1 * static_cast<double>(index + 1);
  r.step = index;
  r.batch = batch;
  r.compute_ms = compute_ms;
  r.pull_ms = 2.0;
  r.push_ms = 3.0;
  return r;
}

pstrain::RunConfig sync_restart_config() {
  pstrain::RunConfig c;
  c.mode = pstrain::Mode::kSync;
  c.cluster.num_servers = 1;
  c.cluster.num_workers = 2;
  c.cluster.on_worker_failure = pstrain::WorkerFailurePolicy::kRestart;
  c.workload.model = "small_cnn";
  c.workload.dataset = "synthetic";
  return c;
}

// Worker 0 ran 10 steps of 32; worker 1 ran 4, died, and its replacement ran
// the last 5 (the job went on without it for one step).
RunMetrics restarted_run() {
  RunMetrics m;
  WorkerMetrics w0;
  w0.rank = 0;
  for (int i = 0; i < 10; ++i) w0.steps.push_back(step(i, 32, 10.0));
  w0.end = EndRecord{1.0, 10, 320, 0.1, 0.02, 0.03, 0.0, 0};
  WorkerMetrics w1;
  w1.rank = 1;
  for (int i = 0; i < 4; ++i) w1.steps.push_back(step(i, 32, 20.0));
  w1.rejoins = {RejoinRecord{0.6, 5, 4}};
  for (int i = 5; i < 10; ++i) w1.steps.push_back(step(i, 32, 20.0));
  w1.end = EndRecord{1.02, 5, 160, 0.1, 0.01, 0.015, 0.0, 1};
  m.workers = {w0, w1};
  return m;
}

}  // namespace

TEST_CASE("a restarted rank: its predecessors' steps are added to its last process's counts") {
  const RunSummary s = summarize(sync_restart_config(), restarted_run());
  REQUIRE(s.per_worker.size() == 2);
  const WorkerSummary& w1 = s.per_worker[1];
  CHECK(w1.status == "restarted");
  CHECK(s.per_worker[0].status == "done");
  CHECK(w1.images == 160 + 4 * 32);
  CHECK(w1.compute_s == doctest::Approx(0.1 + 4 * 0.020));
  CHECK(w1.pull_s == doctest::Approx(0.01 + 4 * 0.002));
  CHECK(w1.push_s == doctest::Approx(0.015 + 4 * 0.003));
  CHECK(w1.skipped_steps == 1);
  CHECK(w1.images_per_s == doctest::Approx(288 / 1.02));
  CHECK(s.global_images_per_s == doctest::Approx((320 + 288) / 1.02));
  const JsonValue j = parse_json(summary_json(s), "summary.json");
  CHECK(j.find("per_worker")->items().at(1).find("status")->as_string("status") == "restarted");
  CHECK(j.find("per_worker")->items().at(1).find("images")->as_integer("images") == 288);
  CHECK(summary_markdown(s, "run").find("| 1 | restarted | 1.02 | 288 |") != std::string::npos);
}

TEST_CASE("a resumed run says from which checkpoint step, once however many workers resumed") {
  RunMetrics m = restarted_run();
  m.workers[1].rejoins.clear();
  m.workers[0].resumes = {ResumeRecord{0.4, 4}};
  m.workers[1].resumes = {ResumeRecord{0.4, 4}};
  const RunSummary s = summarize(sync_restart_config(), m);
  CHECK(s.resumed_from == std::vector<std::int64_t>{4});
  const JsonValue j = parse_json(summary_json(s), "summary.json");
  REQUIRE(j.find("resumed_from")->items().size() == 1);
  CHECK(j.find("resumed_from")->items().at(0).as_integer("step") == 4);
  CHECK(summary_markdown(s, "run").find("resumed (launch --resume) from the checkpoint of step 4") != std::string::npos);
  // A run never resumed says nothing of it.
  CHECK(summarize(sync_restart_config(), restarted_run()).resumed_from.empty());
  CHECK(summary_markdown(summarize(sync_restart_config(), restarted_run()), "run").find("## Resumed") ==
        std::string::npos);
}

TEST_CASE("the reader places a rejoin record among the steps and reads resume records") {
  report_test::TempDir dir;
  const auto file = dir.path() / "worker-1.jsonl";
  const std::string step_fields =
      ",\"epoch\":0,\"batch\":32,\"loss\":1.0,\"accuracy\":0.5,\"images_per_s\":100,\"compute_ms\":1,\"pull_ms\":1,"
      "\"push_ms\":1,\"lr\":0.1,\"staleness\":0,\"simulated\":false,\"skipped\":false,\"job_s\":";
  std::string text = "{\"type\":\"resume\",\"time_s\":0.5,\"step\":2,\"job_s\":0.1}\n";
  for (int i = 2; i < 5; ++i) {
    text += "{\"type\":\"step\",\"time_s\":0." + std::to_string(i + 5) + ",\"step\":" + std::to_string(i) + step_fields +
            "1.0}\n";
  }
  text += "{\"type\":\"rejoin\",\"time_s\":1.5,\"step\":6,\"job_s\":2.0}\n";
  text += "{\"type\":\"step\",\"time_s\":1.6,\"step\":6" + step_fields + "2.1}\n";
  report_test::write_file(file, text);
  const WorkerMetrics w = read_worker_metrics(file, 1, true);
  REQUIRE(w.resumes.size() == 1);
  CHECK(w.resumes[0].step == 2);
  REQUIRE(w.rejoins.size() == 1);
  CHECK(w.rejoins[0].steps_before == 3);
  CHECK(w.rejoins[0].step == 6);
  CHECK(w.steps.size() == 4);
}
