// Reading resources CSVs (strict, errors naming FILE:LINE), their means and
// peaks, and how the summary shows them or warns about a bad file.
#include <doctest/doctest.h>

#include "common/base/errors.h"
#include "tests/report/report_test_util.h"
#include "tools/report/json_value.h"
#include "tools/report/resources.h"
#include "tools/report/summary.h"
#include "tests/support/throw_text.h"

using namespace pstrain::report;
using report_test::TempDir;

namespace {

const std::string kHeader =
    "time_s,cpu_user_s,cpu_system_s,cpu_percent,rss_bytes,bytes_sent,bytes_received,collective_bytes,"
    "gpu_util_percent,gpu_mem_used_bytes,gpu_power_w\n";

// A worker over 2 s: 1.5 CPU s in that time (75 %), 2 MiB sent in total.
const std::string kWorkerRows =
    "1.000,0.5000,0.1000,60.0,10485760,1048576,100,,,,\n"
    "2.000,0.9000,0.2000,50.0,20971520,1572864,300,,,,\n"
    "3.000,1.7000,0.4000,100.0,15728640,2097152,500,,,,\n";

std::string error_of(const std::filesystem::path& file) {
  return pstrain::test::thrown_text<pstrain::DataError>([&] { read_resource_csv(file, "worker", 0); });
}

}  // namespace

TEST_CASE("a resources CSV reads back; means, peaks and rates follow their definitions") {
  TempDir dir;
  const auto file = dir.path() / "resources-worker-0.csv";
  report_test::write_file(file, kHeader + kWorkerRows);
  const ResourceSeries series = read_resource_csv(file, "worker", 0);
  REQUIRE(series.samples.size() == 3);
  CHECK(series.samples[1].rss_bytes == 20971520.0);
  CHECK_FALSE(series.samples[1].gpu_util_percent.has_value());

  const ResourceSummary r = summarize_resources(series);
  CHECK(r.samples == 3);
  CHECK(r.duration_s == doctest::Approx(2.0));
  CHECK(r.cpu_s == doctest::Approx(2.1));
  CHECK(*r.cpu_percent_mean == doctest::Approx(75.0));  // (2.1 - 0.6) / 2 s
  CHECK(*r.cpu_percent_peak == 100.0);
  CHECK(*r.rss_peak_bytes == 20971520.0);
  CHECK(*r.bytes_sent == 2097152.0);
  CHECK(*r.bytes_received == 500.0);
  CHECK(*r.send_bytes_per_s == doctest::Approx(524288.0));  // (2 MiB - 1 MiB) / 2 s
  CHECK(*r.receive_bytes_per_s == doctest::Approx(200.0));
  CHECK_FALSE(r.collective_bytes.has_value());
  CHECK_FALSE(r.has_gpu());

  const JsonValue j = parse_json(resource_summary_json(r), "resources");
  CHECK(j.find("role")->as_string("role") == "worker");
  CHECK(j.find("bytes_sent")->as_integer("bytes_sent") == 2097152);
  CHECK(j.find("cpu_percent_mean")->as_number("c") == doctest::Approx(75.0));
  CHECK(j.find("gpu")->is_null());
  CHECK(j.find("collective_bytes")->is_null());
}

TEST_CASE("GPU columns: mean and peak utilization, peak memory, mean power") {
  TempDir dir;
  const auto file = dir.path() / "resources-worker-1.csv";
  report_test::write_file(file, kHeader +
                                    "0.5,1,0,100,1000000,10,10,4096,20,1000,50.0\n"
                                    "1.0,1.5,0,100,1000000,20,20,8192,60,3000,70.0\n"
                                    "1.2,1.7,0,100,1000000,30,30,8192,,,\n");
  const ResourceSummary r = summarize_resources(read_resource_csv(file, "worker", 1));
  CHECK(*r.gpu_util_percent_mean == doctest::Approx(40.0));
  CHECK(*r.gpu_util_percent_peak == 60.0);
  CHECK(*r.gpu_mem_used_peak_bytes == 3000.0);
  CHECK(*r.gpu_power_w_mean == doctest::Approx(60.0));
  CHECK(*r.collective_bytes == 8192.0);
  const JsonValue j = parse_json(resource_summary_json(r), "resources");
  CHECK(j.find("gpu")->find("util_percent_peak")->as_number("u") == 60.0);
  CHECK(j.find("gpu")->find("mem_used_peak_bytes")->as_integer("m") == 3000);
}

TEST_CASE("one row: the mean is that row's cpu_percent and there is no rate") {
  TempDir dir;
  const auto file = dir.path() / "r.csv";
  report_test::write_file(file, kHeader + "0.2,0.1,0.0,42.0,2000000,5,6,,,,\n");
  const ResourceSummary r = summarize_resources(read_resource_csv(file, "scheduler", 0));
  CHECK(*r.cpu_percent_mean == 42.0);
  CHECK_FALSE(r.send_bytes_per_s.has_value());
  CHECK(*r.bytes_received == 6.0);
}

TEST_CASE("a bad resources CSV is an error naming the file, the line and the column") {
  TempDir dir;
  const auto file = dir.path() / "bad.csv";
  const std::string name = file.string();
  report_test::write_file(file, "");
  CHECK(error_of(file) == name + ": empty, expected the header line");
  report_test::write_file(file, "time_s,cpu_user_s\n");
  CHECK(error_of(file) == name + ":1: header lacks column 'cpu_system_s'");
  report_test::write_file(file, kHeader + kWorkerRows + "4.0,abc,0,1,1,1,1,,,,\n");
  CHECK(error_of(file) == name + ":5: column 'cpu_user_s': 'abc' is not a number");
  report_test::write_file(file, kHeader + "1.0,1,0,1,1,1\n");
  CHECK(error_of(file) == name + ":2: 6 cells, the header has 11");
  report_test::write_file(file, kHeader + ",1,0,1,1,1,1,,,,\n");
  CHECK(error_of(file) == name + ":2: column 'time_s' is empty");
  report_test::write_file(file, kHeader + "1.0,1,0,inf,1,1,1,,,,\n");
  CHECK(error_of(file) == name + ":2: column 'cpu_percent': 'inf' is not a number");
  CHECK(error_of(dir.path() / "missing.csv") == (dir.path() / "missing.csv").string() + ": cannot read");

  // A last row without its newline was being written when the process ended: left out.
  report_test::write_file(file, kHeader + kWorkerRows + "4.0,1.9");
  CHECK(read_resource_csv(file, "worker", 0).samples.size() == 3);
  // Extra columns are allowed (a newer writer).
  report_test::write_file(file, "extra," + kHeader + "x," + kWorkerRows.substr(0, kWorkerRows.find('\n') + 1));
  CHECK(read_resource_csv(file, "worker", 0).samples.at(0).rss_bytes == 10485760.0);
}

TEST_CASE("the summary lists every process's resources in order and warns about a bad file") {
  TempDir dir;
  pstrain::RunConfig c;
  c.mode = pstrain::Mode::kSync;
  c.cluster.num_workers = 1;
  c.cluster.num_servers = 1;
  report_test::write_file(dir.path() / "config.toml", pstrain::to_toml(c));
  report_test::write_file(worker_metrics_path(dir.path(), 0), report_test::end_line(2.0, 1, 32));
  report_test::write_file(server_metrics_path(dir.path(), 0),
                          R"({"rank": 0, "updates": 1, "pushes_accepted": 2, "pushes_rejected": 0, "staleness_histogram": {}})");
  const auto metrics = dir.path() / "metrics";
  report_test::write_file(metrics / "resources-worker-0.csv", kHeader + kWorkerRows);
  report_test::write_file(metrics / "resources-scheduler-0.csv", kHeader + "0.5,0.01,0.01,4.0,3000000,10,20,,,,\n");
  report_test::write_file(metrics / "resources-server-0.csv", kHeader + "0.5,0.01,0.01,4.0,oops,10,20,,,,\n");
  report_test::write_file(metrics / "resources-worker-1.csv", kHeader);  // no samples

  const RunSummary s = write_run_summary(dir.path());
  REQUIRE(s.resources.size() == 2);
  CHECK(s.resources[0].role == "scheduler");
  CHECK(s.resources[1].role == "worker");
  REQUIRE(s.warnings.size() == 2);
  CHECK(s.warnings[0] == (metrics / "resources-server-0.csv").string() +
                             ":2: column 'rss_bytes': 'oops' is not a number; resources of resources-server-0.csv left out");
  CHECK(s.warnings[1] == (metrics / "resources-worker-1.csv").string() + ": no samples; left out");

  const JsonValue j = parse_json(report_test::read_file(dir.path() / "summary.json"), "summary.json");
  REQUIRE(j.find("resources")->items().size() == 2);
  const JsonValue& w = j.find("resources")->items()[1];
  CHECK(w.find("rank")->as_integer("rank") == 0);
  CHECK(w.find("cpu_percent_peak")->as_number("p") == 100.0);
  CHECK(w.find("rss_peak_bytes")->as_integer("r") == 20971520);
  CHECK(j.find("warnings")->items().size() == 2);

  const std::string md = report_test::read_file(dir.path() / "summary.md");
  CHECK(md.find("## Resource use") != std::string::npos);
  CHECK(md.find("| process | samples | CPU mean (%) | CPU peak (%) | peak RSS (MiB) | sent (MiB) | received (MiB) | "
                "send rate (MiB/s) | receive rate (MiB/s) |") != std::string::npos);
  CHECK(md.find("| worker 0 | 3 | 75.0 | 100.0 | 20.0 | 2.00 | 0.00 | 0.50 | 0.00 |") != std::string::npos);
  CHECK(md.find("GPU") == std::string::npos);  // no GPU columns without GPU samples
  CHECK(md.find("## Warnings\n\n- " + s.warnings[0]) != std::string::npos);
}

TEST_CASE("without resource files the summary has an empty list and no section") {
  TempDir dir;
  std::vector<std::string> warnings;
  CHECK(read_run_resources(dir.path(), warnings).empty());
  report_test::write_file(dir.path() / "metrics" / "resources-client-0.csv", kHeader + kWorkerRows);
  CHECK(read_run_resources(dir.path(), warnings).empty());
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0].find("not a resources-<scheduler|server|worker>-<rank>.csv name") != std::string::npos);
  RunSummary s;
  CHECK(summary_markdown(s, "r").find("Resource use") == std::string::npos);
  const JsonValue j = parse_json(summary_json(s), "summary.json");
  CHECK(j.find("resources")->items().empty());
  CHECK(j.find("warnings")->items().empty());
}

TEST_CASE("the CPU peak is never below the mean, even when a short run's rounded percentages say less") {
  // Two rows 0.3 s apart whose recorded cpu_percent (rounded, timed by the
  // sampler) says 49.3 while their CPU seconds say 50%: the peak is 50.
  ResourceSeries series;
  series.role = "server";
  series.rank = 0;
  ResourceSample a, b;
  a.time_s = 0.1;
  a.cpu_user_s = 0.05;
  a.cpu_percent = 40.0;
  b.time_s = 0.4;
  b.cpu_user_s = 0.2;
  b.cpu_percent = 49.3;
  series.samples = {a, b};
  const ResourceSummary r = summarize_resources(series);
  CHECK(*r.cpu_percent_mean == doctest::Approx(50.0));
  CHECK(*r.cpu_percent_peak >= *r.cpu_percent_mean - 1e-9);
}
