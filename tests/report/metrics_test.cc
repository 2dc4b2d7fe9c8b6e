// Reading metrics/worker-<w>.jsonl and metrics/server-<s>.json, and the
// errors for files that break docs/run_directory.md.
#include <doctest/doctest.h>

#include <cmath>

#include "common/base/errors.h"
#include "tests/report/report_test_util.h"
#include "tools/report/metrics.h"
#include "tests/support/throw_text.h"

using namespace pstrain::report;
using pstrain::DataError;
using report_test::TempDir;

namespace {

std::string read_error(const std::filesystem::path& file, bool server) {
  return pstrain::test::thrown_text<DataError>([&] {
    if (server) {
      read_server_metrics(file, 0);
    } else {
      read_worker_metrics(file, 0);
    }
  });
}

const std::string kServer0 =
    R"({"rank": 0, "updates": 10, "pushes_accepted": 20, "pushes_rejected": 1, "staleness_histogram": {"0": 5, "2": 7}})";

}  // namespace

TEST_CASE("a worker's records are read in order") {
  TempDir dir;
  const auto file = worker_metrics_path(dir.path(), 1);
  CHECK(file == dir.path() / "metrics" / "worker-1.jsonl");
  report_test::write_file(file, report_test::step_line(0, 0.1, 2.3) + report_test::step_line(1, 0.2, 2.1) + "\n" +
                                    report_test::eval_line(1, 0.3, 0.4) + report_test::end_line(0.5, 2, 64));
  const WorkerMetrics m = read_worker_metrics(file, 1);
  CHECK(m.rank == 1);
  REQUIRE(m.steps.size() == 2);
  CHECK(m.steps[1].step == 1);
  CHECK(m.steps[1].loss == doctest::Approx(2.1));
  CHECK(m.steps[0].batch == 32);
  CHECK(m.steps[0].lr == doctest::Approx(0.05));
  REQUIRE(m.evals.size() == 1);
  CHECK(m.evals[0].test_accuracy == doctest::Approx(0.4));
  REQUIRE(m.end.has_value());
  CHECK(m.end->images == 64);
  CHECK(m.end->push_s == doctest::Approx(0.5));
}

TEST_CASE("a worker's coverage records are read (absent in older files)") {
  TempDir dir;
  const auto file = dir.path() / "w.jsonl";
  report_test::write_file(file, report_test::step_line(0, 0.1, 2.3) +
                                    "{\"type\":\"coverage\",\"time_s\":0.2,\"epoch\":0,\"first_step\":0,\"steps\":1,"
                                    "\"samples\":32,\"checksum\":\"00000000000000ff\"}\n" +
                                    report_test::end_line(0.5, 1, 32));
  const WorkerMetrics m = read_worker_metrics(file, 0);
  REQUIRE(m.coverage.size() == 1);
  CHECK(m.coverage[0].samples == 32);
  CHECK(m.coverage[0].steps == 1);
  CHECK(m.coverage[0].checksum == "00000000000000ff");
  report_test::write_file(file, report_test::step_line(0, 0.1, 2.3) + report_test::end_line(0.5, 1, 32));
  CHECK(read_worker_metrics(file, 0).coverage.empty());
}

TEST_CASE("skipped (step) and skipped_steps (end) are read; absent in older files they mean none") {
  TempDir dir;
  const auto file = dir.path() / "w.jsonl";
  std::string skipped = report_test::step_line(1, 0.2, 2.1);
  skipped.replace(skipped.find("\"simulated\":false"), std::string("\"simulated\":false").size(),
                  "\"simulated\":false,\"skipped\":true");
  std::string end = report_test::end_line(0.5, 2, 64);
  end.replace(end.find("\"push_s\":0.5"), std::string("\"push_s\":0.5").size(), "\"push_s\":0.5,\"skipped_steps\":1");
  report_test::write_file(file, report_test::step_line(0, 0.1, 2.3) + skipped + end);
  WorkerMetrics m = read_worker_metrics(file, 0);
  REQUIRE(m.steps.size() == 2);
  CHECK_FALSE(m.steps[0].skipped);
  CHECK(m.steps[1].skipped);
  CHECK(m.end->skipped_steps == 1);
  report_test::write_file(file, report_test::step_line(0, 0.1, 2.3) + report_test::end_line(0.5, 1, 32));
  m = read_worker_metrics(file, 0);
  CHECK_FALSE(m.steps[0].skipped);
  CHECK(m.end->skipped_steps == 0);
}

TEST_CASE("the plan record gives the steps the worker will run") {
  TempDir dir;
  const auto file = dir.path() / "w.jsonl";
  report_test::write_file(file, "{\"type\":\"plan\",\"time_s\":0.01,\"total_steps\":40,\"steps_per_epoch\":16,"
                                "\"epochs\":3}\n" + report_test::step_line(0, 0.1, 2.3));
  const WorkerMetrics m = read_worker_metrics(file, 0);
  REQUIRE(m.plan.has_value());
  CHECK(m.plan->total_steps == 40);
  CHECK(m.plan->steps_per_epoch == 16);
  CHECK(m.plan->epochs == 3);
  CHECK(m.steps.size() == 1);
  report_test::write_file(file, "{\"type\":\"plan\",\"time_s\":0.01,\"steps_per_epoch\":16,\"epochs\":3}\n");
  CHECK(read_error(file, false) == file.string() + ":1: missing key 'total_steps'");
}

TEST_CASE("later plan records with epoch and workers (and step, within an epoch) are the membership changes") {
  TempDir dir;
  const auto file = dir.path() / "w.jsonl";
  const std::string plan = "{\"type\":\"plan\",\"time_s\":0.01,\"total_steps\":40,\"steps_per_epoch\":16,\"epochs\":3";
  report_test::write_file(file, plan + "}\n" + plan + ",\"epoch\":1,\"workers\":2}\n" + plan +
                                    ",\"epoch\":2,\"workers\":4,\"step\":37}\n");
  const WorkerMetrics m = read_worker_metrics(file, 0);
  REQUIRE(m.plan_changes.size() == 2);
  CHECK(m.plan_changes[0].epoch == 1);
  CHECK(m.plan_changes[0].step == -1);
  CHECK(m.plan_changes[0].workers == 2);
  CHECK(m.plan_changes[1].step == 37);
  CHECK(m.plan_changes[1].workers == 4);
}

TEST_CASE("null numbers read as NaN and unknown keys are ignored") {
  TempDir dir;
  const auto file = dir.path() / "w.jsonl";
  std::string line = report_test::step_line(0, 0.1, 1.0);
  line.replace(line.find("\"loss\":"), std::string("\"loss\":1.000000").size(), "\"loss\":null,\"extra\":[1]");
  report_test::write_file(file, line);
  const WorkerMetrics m = read_worker_metrics(file, 0);
  REQUIRE(m.steps.size() == 1);
  CHECK(std::isnan(m.steps[0].loss));
}

TEST_CASE("worker files that break the format are errors naming file, line and key") {
  TempDir dir;
  const auto file = dir.path() / "w.jsonl";
  const std::string where = file.string();
  std::string no_loss = report_test::step_line(1, 0.2, 2.0);
  no_loss.replace(no_loss.find("\"loss\":"), std::string("\"loss\":2.000000,").size(), "");
  report_test::write_file(file, report_test::step_line(0, 0.1, 2.0) + no_loss);
  CHECK(read_error(file, false) == where + ":2: missing key 'loss'");

  std::string bad_step = report_test::step_line(0, 0.1, 2.0);
  bad_step.replace(bad_step.find("\"step\":0"), 8, "\"step\":\"0\"");
  report_test::write_file(file, bad_step);
  CHECK(read_error(file, false) == where + ":1: key 'step': expected a number, got a string");

  report_test::write_file(file, "{\"type\":\"stop\"}\n");
  CHECK(read_error(file, false) == where + ":1: key 'type': expected \"compute\", \"plan\", \"step\", \"eval\", \"rejoin\", \"resume\", \"join\", \"coverage\" or \"end\", got \"stop\"");

  report_test::write_file(file, report_test::end_line(1, 1, 1) + report_test::step_line(0, 0.1, 2.0));
  CHECK(read_error(file, false) == where + ":2: a record after the \"end\" record");

  report_test::write_file(file, "[1]\n");
  CHECK(read_error(file, false) == where + ":1: expected a JSON object, got an array");

  report_test::write_file(file, "{\"type\":\"end\",}\n");
  CHECK(read_error(file, false) == where + ":1: column 15: expected a key string, found '}'");

  CHECK(read_error(dir.path() / "absent.jsonl", false) ==
        "cannot read " + (dir.path() / "absent.jsonl").string() + ": no such file or not readable");
}

TEST_CASE("a server's counts and staleness histogram are read") {
  TempDir dir;
  const auto file = server_metrics_path(dir.path(), 0);
  report_test::write_file(file, kServer0);
  const ServerMetrics m = read_server_metrics(file, 0);
  CHECK(m.updates == 10);
  CHECK(m.pushes_accepted == 20);
  CHECK(m.pushes_rejected == 1);
  CHECK(m.staleness_histogram == std::map<std::int64_t, std::int64_t>{{0, 5}, {2, 7}});
  CHECK(m.rejoined_from_step == -1);  // an older file, or a server that never failed
  // A server that rejoined after a failure says what was lost.
  report_test::write_file(file, R"({"rank": 0, "updates": 10, "pushes_accepted": 20, "pushes_rejected": 1, )"
                                R"("duplicate_pushes": 2, "rejoined_from_step": 12, "lost_updates": 7, "lost_pushes": 1, )"
                                R"("lost_updates_by_chunk": {"3": 7}, "staleness_histogram": {}})");
  const ServerMetrics r = read_server_metrics(file, 0);
  CHECK(r.rejoined_from_step == 12);
  CHECK(r.lost_updates == 7);
  CHECK(r.lost_pushes == 1);
  CHECK(r.duplicate_pushes == 2);
}

TEST_CASE("server files that break the format are errors naming the file and key") {
  TempDir dir;
  const auto file = dir.path() / "server-0.json";
  const std::string where = file.string();
  report_test::write_file(file, R"({"rank": 1, "updates": 1, "pushes_accepted": 1, "pushes_rejected": 0, "staleness_histogram": {}})");
  CHECK(read_error(file, true) == where + ": key 'rank': expected 0 (from the file name), got 1");
  report_test::write_file(file, R"({"rank": 0, "updates": 1, "pushes_accepted": 1, "pushes_rejected": 0, "staleness_histogram": {"x": 1}})");
  CHECK(read_error(file, true) == where + ": key 'staleness_histogram': key 'x' is not a staleness (a non-negative integer)");
  report_test::write_file(file, R"({"rank": 0, "updates": 1, "pushes_accepted": 1, "pushes_rejected": 0, "staleness_histogram": {"-1": 1}})");
  CHECK(read_error(file, true) == where + ": key 'staleness_histogram': key '-1' is not a staleness (a non-negative integer)");
  report_test::write_file(file, R"({"rank": 0, "updates": 1.5, "pushes_accepted": 1, "pushes_rejected": 0, "staleness_histogram": {}})");
  CHECK(read_error(file, true) == where + ": key 'updates': expected an integer, got 1.500000");
  report_test::write_file(file, R"({"rank": 0, "updates": 1, "pushes_accepted": 1, "pushes_rejected": 0, "staleness_histogram": []})");
  CHECK(read_error(file, true) == where + ": key 'staleness_histogram': expected a JSON object, got an array");
  report_test::write_file(file, R"({"rank": 0, "updates": 1, "pushes_accepted": 1, "pushes_rejected": 0})");
  CHECK(read_error(file, true) == where + ": missing key 'staleness_histogram'");
}

TEST_CASE("read_run_metrics needs every worker's end record and every server's file") {
  TempDir dir;
  report_test::write_file(worker_metrics_path(dir.path(), 0), report_test::end_line(1, 1, 32));
  report_test::write_file(worker_metrics_path(dir.path(), 1), report_test::step_line(0, 0.1, 2.0));
  CHECK_THROWS_WITH_AS(read_run_metrics(dir.path(), 2, 0),
                       (worker_metrics_path(dir.path(), 1).string() +
                        ": no \"end\" record (did worker 1 finish? pstrain-summary --partial summarizes a run that did "
                        "not)").c_str(),
                       DataError);
  report_test::write_file(worker_metrics_path(dir.path(), 1), report_test::end_line(2, 1, 32));
  CHECK_THROWS_WITH_AS(read_run_metrics(dir.path(), 2, 1),
                       ("cannot read " + server_metrics_path(dir.path(), 0).string() + ": no such file or not readable").c_str(),
                       DataError);
  report_test::write_file(server_metrics_path(dir.path(), 0), kServer0);
  const RunMetrics run = read_run_metrics(dir.path(), 2, 1);
  CHECK(run.workers.size() == 2);
  CHECK(run.servers.size() == 1);
  CHECK(run.workers[1].rank == 1);
}

TEST_CASE("lost workers (on_worker_failure = continue): no end record, and a last line cut by the kill") {
  TempDir dir;
  report_test::write_file(worker_metrics_path(dir.path(), 0), report_test::end_line(1, 1, 32));
  // Two whole step records, then the third cut mid-line by SIGKILL (no newline).
  const std::string steps = report_test::step_line(0, 0.1, 2.0) + "\n" + report_test::step_line(1, 0.2, 1.9) + "\n";
  report_test::write_file(worker_metrics_path(dir.path(), 1), steps + "{\"type\":\"step\",\"time_s\":0.3,\"st");
  report_test::write_file(server_metrics_path(dir.path(), 0), kServer0);
  // Strict by default: the cut line is an error.
  CHECK_THROWS_AS(read_run_metrics(dir.path(), 2, 1), DataError);
  const RunMetrics run = read_run_metrics(dir.path(), 2, 1, true);
  CHECK(run.workers[1].steps.size() == 2);
  CHECK_FALSE(run.workers[1].end.has_value());
  // A cut line in the middle of a file is still an error, lost worker or not.
  report_test::write_file(worker_metrics_path(dir.path(), 1), "{\"type\":\"st\n" + steps);
  CHECK_THROWS_AS(read_run_metrics(dir.path(), 2, 1, true), DataError);
}

TEST_CASE("a worker's compute record: the last one counts (a resumed process writes its own)") {
  TempDir dir;
  const auto file = worker_metrics_path(dir.path(), 0);
  const std::string cpu = R"j({"type": "compute", "time_s": 0.01, "backend": "cpu (oneDNN, 1 thread)", )j"
                          R"j("conv_path": "onednn", "conv_detail": "oneDNN 3.0.0", "precision": "fp32"})j";
  const std::string gpu = R"j({"type": "compute", "time_s": 0.02, "backend": "cuda:0 (X)", "conv_path": "cudnn", )j"
                          R"j("conv_detail": "convolutions by cuDNN 9.19.0", "precision": "tf32"})j";
  report_test::write_file(file, cpu + "\n" + report_test::step_line(0, 0.1, 2.3) + gpu + "\n" +
                                    report_test::end_line(0.5, 1, 32));
  const WorkerMetrics m = read_worker_metrics(file, 0);
  REQUIRE(m.compute.has_value());
  CHECK(m.compute->conv_path == "cudnn");
  CHECK(m.compute->precision == "tf32");
  CHECK(m.compute->backend == "cuda:0 (X)");
  CHECK(m.steps.size() == 1);
  report_test::write_file(file, report_test::step_line(0, 0.1, 2.3) + report_test::end_line(0.5, 1, 32));
  CHECK_FALSE(read_worker_metrics(file, 0).compute.has_value());  // older runs: none
  report_test::write_file(file, R"j({"type": "compute", "time_s": 0.01, "backend": "cpu"})j" "\n");
  CHECK(read_error(file, false).find("conv_path") != std::string::npos);
}
