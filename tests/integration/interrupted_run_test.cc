// A run stopped by Ctrl-C (SIGINT) or SIGTERM to the launcher keeps its
// timeline and gets a partial summary: every node writes its trace part as
// it is stopped (guarded_main's termination watch), the launcher merges them
// into a valid trace.json, writes summary.json and summary.md marked partial
// with the reason and the steps that ran, and its status line's last line
// says how the run ended. Before, the stopped nodes wrote no part and there
// was no summary (pstrain-summary refused the run).
#include <doctest/doctest.h>

#include <algorithm>
#include <csignal>
#include <map>
#include <set>
#include <utility>

#include "tests/integration/launch_test_util.h"
#include "tools/report/json_value.h"
#include "tools/report/metrics.h"
#include "tools/report/trace_merge.h"

namespace {

namespace report = pstrain::report;

// The processes whose parts were merged, and those of them with spans
// (servers record spans only at trace level "all").
std::pair<std::set<std::string>, std::set<std::string>> traced_processes(const report::JsonValue& trace) {
  std::set<std::string> names, with_spans;
  std::set<std::int64_t> span_pids;
  std::map<std::int64_t, std::string> by_pid;
  for (const report::JsonValue& e : trace.find("traceEvents")->items()) {
    const std::string ph = e.find("ph")->as_string("ph");
    const std::int64_t pid = e.find("pid")->as_integer("pid");
    if (ph == "M" && e.find("name")->as_string("name") == "process_name") {
      by_pid[pid] = e.find("args")->find("name")->as_string("name");
      names.insert(by_pid[pid]);
    }
    if (ph == "X") span_pids.insert(pid);
  }
  for (const std::int64_t pid : span_pids) with_spans.insert(by_pid[pid]);
  return {names, with_spans};
}

void interrupt_run(int sig) {
  it::TempDir dir;
  const auto run = dir.path() / "run";
  auto args = it::launch_args(it::kSourceDir / "configs/tiny_sync.toml", run);
  args.insert(args.end(), {"--set", "workload.epochs=50", "--set", "output.trace=steps", "--quiet",
                           "--status-interval-s", "1000"});
  it::LaunchProcess p(args, dir.path() / "out.txt");
  const bool training = it::wait_until(
      [&] {
        return it::count_lines(report::worker_metrics_path(run, 0)) >= 6 &&
               it::count_lines(report::worker_metrics_path(run, 1)) >= 6;
      },
      std::chrono::seconds(180), "both workers' first steps");
  INFO(p.output());
  REQUIRE(training);
  REQUIRE(kill(p.pid(), sig) == 0);
  const auto exit = p.wait(std::chrono::seconds(120));
  const std::string output = p.output();
  INFO(output);
  REQUIRE(exit.has_value());
  CHECK_FALSE(exit->signaled);
  CHECK(exit->code == 128 + sig);
  const std::string reason = "interrupted by signal " + std::to_string(sig) + (sig == SIGINT ? " (SIGINT)" : " (SIGTERM)");

  // The timeline: valid, with the spans of every process, the workers' steps among them.
  REQUIRE(it::fs::exists(run / "trace.json"));
  const report::JsonValue trace = report::parse_json(it::read_file(run / "trace.json"), "trace.json");
  const std::vector<std::string> problems = report::check_trace(trace);
  for (const std::string& problem : problems) INFO(problem);
  CHECK(problems.empty());
  const auto [parts, with_spans] = traced_processes(trace);
  CHECK(parts == std::set<std::string>{"scheduler", "server 0", "server 1", "worker 0", "worker 1"});
  CHECK(with_spans == std::set<std::string>{"scheduler", "worker 0", "worker 1"});
  CHECK(it::contains(it::read_file(run / "trace" / "worker-0.json"), "\"name\":\"step\""));

  // The partial summary: the reason, and the steps each worker's records hold.
  REQUIRE(it::fs::exists(run / "summary.json"));
  const report::JsonValue summary = report::parse_json(it::read_file(run / "summary.json"), "summary.json");
  CHECK(summary.find("partial")->as_bool("partial"));
  CHECK(summary.find("partial_reason")->as_string("partial_reason") == reason);
  std::int64_t least = -1;
  for (int w = 0; w < 2; ++w) {
    CAPTURE(w);
    const report::WorkerMetrics m = report::read_worker_metrics(report::worker_metrics_path(run, w), w, true);
    REQUIRE_FALSE(m.steps.empty());
    const report::JsonValue& row = summary.find("per_worker")->items().at(static_cast<std::size_t>(w));
    CHECK(row.find("status")->as_string("status") == "interrupted");
    CHECK(row.find("steps_done")->as_integer("steps_done") == m.steps.back().step + 1);
    CHECK(row.find("images")->as_integer("images") == 32 * static_cast<std::int64_t>(m.steps.size()));
    least = least < 0 ? m.steps.back().step + 1 : std::min(least, m.steps.back().step + 1);
  }
  CHECK(it::contains(it::read_file(run / "summary.md"), "**Partial**: the run did not finish (" + reason + ")"));
  CHECK(it::contains(output, " launch] partial summary (" + reason + "; " + std::to_string(least) +
                                 " steps by every worker left) in " + (run / "summary.md").string()));
  CHECK(it::contains(output, " status] done (interrupted): step "));

  // By hand, the same: pstrain-summary --partial keeps the recorded reason; without it, refused naming --partial.
  const std::string out = (dir.path() / "summary.txt").string();
  const std::string summary_bin = (it::kBinDir / "pstrain-summary").string();
  int rc = std::system((summary_bin + " " + run.string() + " > " + out + " 2>&1").c_str());
  CHECK(WEXITSTATUS(rc) == 3);
  CHECK(it::contains(it::read_file(out), "pstrain-summary --partial"));
  rc = std::system((summary_bin + " --partial --quiet " + run.string() + " > " + out + " 2>&1").c_str());
  CHECK(WEXITSTATUS(rc) == 0);
  CHECK(report::parse_json(it::read_file(run / "summary.json"), "summary.json")
            .find("partial_reason")
            ->as_string("partial_reason") == reason);
}

}  // namespace

TEST_CASE("Ctrl-C (SIGINT) to the launcher: a valid trace.json of every process and a partial summary") {
  interrupt_run(SIGINT);
}

TEST_CASE("SIGTERM to the launcher: a valid trace.json of every process and a partial summary") {
  interrupt_run(SIGTERM);
}
