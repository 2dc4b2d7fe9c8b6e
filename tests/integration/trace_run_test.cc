// The job timeline of real runs: every process writes RUN_DIR/trace/<role>-<rank>.json
// and the launcher merges them into RUN_DIR/trace.json (docs/run_directory.md).
#include <doctest/doctest.h>

#include <map>
#include <set>

#include "tests/integration/launch_test_util.h"
#include "tools/report/json_value.h"
#include "tools/report/trace_merge.h"

namespace {

using pstrain::report::JsonValue;

struct Timeline {
  std::map<std::int64_t, std::string> process;                            // pid -> "worker 0"
  std::map<std::pair<std::int64_t, std::int64_t>, std::string> thread;    // (pid, tid) -> name
  std::map<std::string, std::multiset<std::string>> spans;                // process -> span names
  std::map<std::string, std::set<std::string>> span_threads;              // span name -> thread names
};

Timeline read_timeline(const JsonValue& trace) {
  Timeline t;
  for (const JsonValue& e : trace.find("traceEvents")->items()) {
    const std::string ph = e.find("ph")->as_string("ph");
    const std::int64_t pid = e.find("pid")->as_integer("pid"), tid = e.find("tid")->as_integer("tid");
    const std::string name = e.find("name")->as_string("name");
    if (ph == "M" && name == "process_name") t.process[pid] = e.find("args")->find("name")->as_string("name");
    if (ph == "M" && name == "thread_name") t.thread[{pid, tid}] = e.find("args")->find("name")->as_string("name");
    if (ph == "X") {
      t.spans[t.process.at(pid)].insert(name);
      t.span_threads[name].insert(t.thread.at({pid, tid}));
    }
  }
  return t;
}

JsonValue run_traced(const it::fs::path& config, const it::fs::path& run, const it::TempDir& dir,
                     const std::string& level, int steps) {
  auto args = it::launch_args(config, run);
  args.insert(args.end(), {"--set", "output.trace=" + level, "--set",
                           "workload.max_steps=" + std::to_string(steps), "--quiet"});
  const it::Result r = it::run_launch(args, dir.path());
  INFO(r.output);
  REQUIRE(r.exit.code == 0);
  CHECK(it::contains(r.output, " launch] trace: "));
  REQUIRE(it::fs::exists(run / "trace.json"));
  return pstrain::report::parse_json(it::read_file(run / "trace.json"), (run / "trace.json").string());
}

}  // namespace

TEST_CASE("a sync run with trace = all: spans of every process, nested, in order per thread") {
  it::TempDir dir;
  const auto run = dir.path() / "run";
  const int steps = 5;
  const JsonValue trace = run_traced(it::kSourceDir / "configs/tiny_sync.toml", run, dir, "all", steps);
  const std::vector<std::string> problems = pstrain::report::check_trace(trace);
  for (const std::string& p : problems) INFO(p);
  CHECK(problems.empty());

  const Timeline t = read_timeline(trace);
  // Ordered scheduler, servers, workers.
  CHECK(t.process == std::map<std::int64_t, std::string>{
                         {1, "scheduler"}, {2, "server 0"}, {3, "server 1"}, {4, "worker 0"}, {5, "worker 1"}});
  for (const auto& [pid, name] : t.process) {
    CAPTURE(name);
    CHECK(t.spans.count(name) == 1);  // every process recorded spans
  }
  for (const char* worker : {"worker 0", "worker 1"}) {
    CAPTURE(worker);
    const auto& s = t.spans.at(worker);
    CHECK(s.count("step") == steps);
    CHECK(s.count("forward+backward") == steps);
    CHECK(s.count("data") == steps);
    CHECK(s.count("push wait") == steps);
    CHECK(s.count("pull wait") >= steps);
    CHECK(s.count("push") > 0);  // per chunk, on the server tracks
    CHECK(s.count("pull") > 0);
  }
  CHECK(t.spans.at("worker 0").count("eval") == 1);  // the final evaluation (max_steps ends in epoch 0)
  for (const char* server : {"server 0", "server 1"}) {
    CAPTURE(server);
    const auto& s = t.spans.at(server);
    for (const char* name : {"push", "pull", "receive", "sum", "update", "reply"}) {
      CAPTURE(name);
      CHECK(s.count(name) > 0);
    }
  }
  CHECK(t.span_threads.at("step") == std::set<std::string>{"training"});
  CHECK(t.span_threads.at("push") ==
        std::set<std::string>{"chunks <-> server 0", "chunks <-> server 1", "requests"});
  const JsonValue& other = *trace.find("otherData");
  CHECK(other.find("dropped_events")->as_integer("dropped_events") == 0);
  CHECK(other.find("processes")->items().size() == 5);

  SUBCASE("merge_trace by hand: a corrupt part is named and the others are still merged") {
    it::write_file(run / "trace" / "server-1.json", "{\"traceEvents\":[{\"ph\":");
    it::fs::remove(run / "trace.json");
    const std::string out = (dir.path() / "merge.txt").string();
    const int rc = std::system(((it::kBinDir / "merge_trace").string() + " " + run.string() + " > " + out + " 2>&1").c_str());
    const std::string text = it::read_file(out);
    INFO(text);
    CHECK(WEXITSTATUS(rc) == 1);
    CHECK(it::contains(text, "server-1.json"));
    CHECK(it::contains(text, "4 process(es)"));
    const JsonValue merged = pstrain::report::parse_json(it::read_file(run / "trace.json"), "trace.json");
    CHECK(read_timeline(merged).process.size() == 4);
  }
}

TEST_CASE("an allreduce run with trace = all records each bucket on the Gloo thread") {
  it::TempDir dir;
  const auto run = dir.path() / "run";
  const JsonValue trace = run_traced(it::kSourceDir / "configs/tiny_allreduce.toml", run, dir, "all", 4);
  CHECK(pstrain::report::check_trace(trace).empty());
  const Timeline t = read_timeline(trace);
  CHECK(t.process.size() == 3);  // scheduler and two workers
  for (const char* worker : {"worker 0", "worker 1"}) {
    CAPTURE(worker);
    const auto& s = t.spans.at(worker);
    CHECK(s.count("step") == 4);
    CHECK(s.count("allreduce wait") == 4);
    CHECK(s.count("update") == 4);
    CHECK(s.count("allreduce bucket") >= 4 * 2);  // small_cnn's gradients go in several 16 KB buckets
  }
  CHECK(t.span_threads.at("allreduce bucket") == std::set<std::string>{"allreduce (gloo)"});
}

TEST_CASE("trace = steps records steps but no per-chunk spans; trace = off writes no timeline") {
  it::TempDir dir;
  const auto run = dir.path() / "steps";
  const JsonValue trace = run_traced(it::kSourceDir / "configs/tiny_sync.toml", run, dir, "steps", 3);
  CHECK(pstrain::report::check_trace(trace).empty());
  const Timeline t = read_timeline(trace);
  CHECK(t.spans.at("worker 1").count("step") == 3);
  CHECK(t.spans.at("worker 1").count("push") == 0);
  CHECK(t.spans.count("server 0") == 0);  // servers record per-request spans only at "all"

  const auto off = dir.path() / "off";
  auto args = it::launch_args(it::kSourceDir / "configs/tiny_sync.toml", off);
  args.insert(args.end(), {"--set", "output.trace=off", "--set", "workload.max_steps=3", "--quiet"});
  const it::Result r = it::run_launch(args, dir.path());
  INFO(r.output);
  REQUIRE(r.exit.code == 0);
  CHECK_FALSE(it::fs::exists(off / "trace.json"));
  CHECK_FALSE(it::fs::exists(off / "trace"));
  CHECK_FALSE(it::contains(r.output, " launch] trace"));
}
