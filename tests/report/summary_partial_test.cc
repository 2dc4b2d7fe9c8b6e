// A partial summary (pstrain-summary --partial, and launch when a run ends
// interrupted or failed): what ran until then, marked partial with the
// reason; a worker without its end record is "interrupted", counted from
// its step records; missing files are warnings. Without --partial such a
// run is still refused, and the error names --partial.
#include <doctest/doctest.h>

#include "common/base/errors.h"
#include "common/config/config.h"
#include "tests/report/report_test_util.h"
#include "tools/report/json_value.h"
#include "tools/report/metrics.h"
#include "tools/report/summary.h"

using namespace pstrain::report;

namespace {

// A sync run of 2 workers and 2 servers stopped by Ctrl-C: worker 0 ran
// steps 0..6, worker 1 steps 0..5 and was cut in the middle of its next
// line; no server wrote its counts (they write them when they end).
void interrupted_run(const std::filesystem::path& dir) {
  pstrain::RunConfig c;
  c.mode = pstrain::Mode::kSync;
  c.cluster.num_servers = 2;
  c.cluster.num_workers = 2;
  report_test::write_file(dir / "config.toml", pstrain::to_toml(c));
  std::string w0, w1;
  for (int i = 0; i < 7; ++i) w0 += report_test::step_line(i, 0.1 * (i + 1), 2.0);
  for (int i = 0; i < 6; ++i) w1 += report_test::step_line(i, 0.1 * (i + 1), 2.0);
  w1 += "{\"type\":\"step\",\"time_s\":0.7,\"st";
  report_test::write_file(worker_metrics_path(dir, 0), w0 + report_test::eval_line(4, 0.55, 0.5));
  report_test::write_file(worker_metrics_path(dir, 1), w1);
}

}  // namespace

TEST_CASE("a partial summary says what ran until the run was interrupted, and why it ended") {
  report_test::TempDir dir;
  interrupted_run(dir.path());
  CHECK_THROWS_AS(write_run_summary(dir.path()), pstrain::DataError);  // a run that did not finish: refused
  const PartialRun partial{"interrupted by signal 2 (SIGINT)"};
  const RunSummary s = write_run_summary(dir.path(), &partial);
  CHECK(s.partial);
  REQUIRE(s.per_worker.size() == 2);
  CHECK(s.per_worker[0].status == "interrupted");
  CHECK(s.per_worker[0].steps_done == 7);
  CHECK(s.per_worker[0].images == 7 * 32);
  CHECK(s.per_worker[1].steps_done == 6);  // the cut line never happened
  CHECK(s.dropped_workers.empty());
  CHECK(s.wall_time_s == doctest::Approx(0.7));
  CHECK(s.global_images_per_s == doctest::Approx(13 * 32 / 0.7));
  CHECK(s.final_test_accuracy.value() == doctest::Approx(0.5));
  REQUIRE(s.warnings.size() == 2);  // neither server wrote its counts
  CHECK(s.warnings[0].find("server 0 left out") == 0);
  const JsonValue j = parse_json(report_test::read_file(dir.path() / "summary.json"), "summary.json");
  CHECK(j.find("partial")->as_bool("partial"));
  CHECK(j.find("partial_reason")->as_string("partial_reason") == "interrupted by signal 2 (SIGINT)");
  CHECK(j.find("per_worker")->items().at(1).find("steps_done")->as_integer("steps_done") == 6);
  const std::string md = report_test::read_file(dir.path() / "summary.md");
  CHECK(md.find("**Partial**: the run did not finish (interrupted by signal 2 (SIGINT)). This is what ran until then "
                "(6 steps by every worker left)") != std::string::npos);
  CHECK(md.find("| 1 | interrupted |") != std::string::npos);
  CHECK(recorded_partial_reason(dir.path()) == "interrupted by signal 2 (SIGINT)");
}

TEST_CASE("a finished run's summary is not partial, and a worker's steps_done is its last step + 1") {
  report_test::TempDir dir;
  interrupted_run(dir.path());
  CHECK(recorded_partial_reason(dir.path()).empty());  // no summary yet
  report_test::write_file(worker_metrics_path(dir.path(), 0),
                          report_test::step_line(0, 0.1, 2.0) + report_test::step_line(1, 0.2, 2.0) +
                              report_test::end_line(0.3, 2, 64));
  report_test::write_file(worker_metrics_path(dir.path(), 1), report_test::step_line(0, 0.1, 2.0) +
                                                                  report_test::step_line(1, 0.2, 2.0) +
                                                                  report_test::end_line(0.3, 2, 64));
  for (int s = 0; s < 2; ++s) {
    report_test::write_file(server_metrics_path(dir.path(), s),
                            "{\"rank\": " + std::to_string(s) +
                                ", \"updates\": 1, \"pushes_accepted\": 2, \"pushes_rejected\": 0, "
                                "\"staleness_histogram\": {}}");
  }
  const RunSummary s = write_run_summary(dir.path());
  CHECK_FALSE(s.partial);
  CHECK(s.per_worker.at(0).steps_done == 2);
  const JsonValue j = parse_json(report_test::read_file(dir.path() / "summary.json"), "summary.json");
  CHECK_FALSE(j.find("partial")->as_bool("partial"));
  CHECK(j.find("partial_reason")->is_null());
  CHECK(report_test::read_file(dir.path() / "summary.md").find("Partial") == std::string::npos);
}
