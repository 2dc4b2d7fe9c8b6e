// The timeline: TraceRecorder (common/observe/trace.h) and its merge and checks
// (tools/report/trace_merge.h). Here rather than in tests/common because the
// JSON reader lives in pstrain_report.
#include <doctest/doctest.h>

#include <atomic>
#include <set>
#include <thread>

#include "common/base/errors.h"
#include "common/observe/trace.h"
#include "report_test_util.h"
#include "tools/report/json_value.h"
#include "tools/report/trace_merge.h"

using pstrain::JobClock;
using pstrain::TraceLevel;
using pstrain::TraceRecorder;
using pstrain::TraceSpan;
using pstrain::report::JsonValue;
using pstrain::report::parse_json;

namespace {

const JobClock kClock(JobClock::unix_now_us());

// The complete events of a parsed trace, in file order.
std::vector<const JsonValue*> spans_of(const JsonValue& trace) {
  std::vector<const JsonValue*> out;
  for (const JsonValue& e : trace.find("traceEvents")->items()) {
    if (e.find("ph")->as_string("ph") == "X") out.push_back(&e);
  }
  return out;
}

std::string name_of(const JsonValue* e) { return e->find("name")->as_string("name"); }

}  // namespace

TEST_CASE("trace levels parse and filter spans") {
  CHECK(pstrain::parse_trace_level("off") == TraceLevel::kOff);
  CHECK(pstrain::parse_trace_level("steps") == TraceLevel::kSteps);
  CHECK(pstrain::parse_trace_level("all") == TraceLevel::kAll);
  CHECK_THROWS_AS(pstrain::parse_trace_level("full"), pstrain::ConfigError);

  for (const TraceLevel level : {TraceLevel::kOff, TraceLevel::kSteps, TraceLevel::kAll}) {
    TraceRecorder trace(level, kClock);
    {
      TraceSpan step(&trace, TraceLevel::kSteps, "step", "worker");
      TraceSpan chunk(&trace, TraceLevel::kAll, "push", "chunk");
      CHECK(step.active() == (level != TraceLevel::kOff));
      CHECK(chunk.active() == (level == TraceLevel::kAll));
    }
    CHECK(trace.size() == static_cast<std::size_t>(level));  // off 0, steps 1, all 2
  }
  TraceSpan none(nullptr, TraceLevel::kSteps, "step", "worker");  // no recorder: inactive, no crash
  CHECK_FALSE(none.active());
}

TEST_CASE("spans nest, carry their arguments and come out parent first") {
  TraceRecorder trace(TraceLevel::kAll, kClock);
  trace.set_process("worker", 3);
  trace.name_this_thread("training");
  {
    TraceSpan step(&trace, TraceLevel::kSteps, "step", "worker");
    step.arg("step", 7).arg("epoch", 1);
    {
      TraceSpan a(&trace, TraceLevel::kSteps, "forward+backward", "worker");
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    TraceSpan b(&trace, TraceLevel::kSteps, "push wait", "worker");
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  TraceSpan cancelled(&trace, TraceLevel::kSteps, "nothing", "worker");
  cancelled.cancel();

  const auto events = trace.events();
  REQUIRE(events.size() == 3);
  CHECK(std::string(events[0].name) == "step");
  CHECK(std::string(events[1].name) == "forward+backward");
  CHECK(std::string(events[2].name) == "push wait");
  const auto end = [](const pstrain::TraceEvent& e) { return e.ts_us + e.dur_us; };
  for (std::size_t i = 1; i < 3; ++i) {
    CHECK(events[i].ts_us >= events[0].ts_us);
    CHECK(end(events[i]) <= end(events[0]));
  }
  CHECK(events[2].ts_us >= end(events[1]));
  CHECK(events[1].dur_us >= 2000);
  REQUIRE(events[0].num_args == 2);
  CHECK(std::string(events[0].args[0].key) == "step");
  CHECK(events[0].args[0].value == 7);

  const JsonValue json = parse_json(trace.to_json(), "to_json");
  CHECK(pstrain::report::check_trace(json).empty());
  const auto spans = spans_of(json);
  REQUIRE(spans.size() == 3);
  CHECK(name_of(spans[0]) == "step");
  CHECK(spans[0]->find("args")->find("epoch")->as_integer("epoch") == 1);
  CHECK(json.find("displayTimeUnit")->as_string("unit") == "ms");
  const JsonValue& other = *json.find("otherData");
  CHECK(other.find("role")->as_string("role") == "worker");
  CHECK(other.find("rank")->as_integer("rank") == 3);
  CHECK(other.find("dropped_events")->as_integer("dropped") == 0);
  // Metadata: the process and thread names viewers show.
  bool process_named = false, thread_named = false;
  for (const JsonValue& e : json.find("traceEvents")->items()) {
    if (e.find("ph")->as_string("ph") != "M") continue;
    const std::string what = e.find("name")->as_string("name");
    if (what == "process_name") process_named = e.find("args")->find("name")->as_string("n") == "worker 3";
    if (what == "thread_name") thread_named = e.find("args")->find("name")->as_string("n") == "training";
  }
  CHECK(process_named);
  CHECK(thread_named);
  CHECK(trace.file_name() == "worker-3.json");
}

TEST_CASE("the event cap drops later events, counts them and says so in the file") {
  TraceRecorder trace(TraceLevel::kSteps, kClock, 5);
  for (int i = 0; i < 12; ++i) TraceSpan s(&trace, TraceLevel::kSteps, "step", "worker");
  CHECK(trace.size() == 5);
  CHECK(trace.dropped() == 7);
  const JsonValue json = parse_json(trace.to_json(), "to_json");
  CHECK(spans_of(json).size() == 5);
  CHECK(json.find("otherData")->find("dropped_events")->as_integer("dropped") == 7);
  CHECK(json.find("otherData")->find("max_events")->as_integer("max") == 5);
}

TEST_CASE("threads get distinct ids, tracks their own, and recording is thread-safe") {
  TraceRecorder trace(TraceLevel::kAll, kClock);
  const std::uint32_t main_tid = trace.this_thread();
  CHECK(trace.this_thread() == main_tid);
  std::vector<std::thread> threads;
  std::vector<std::uint32_t> tids(4);
  for (std::size_t t = 0; t < tids.size(); ++t) {
    threads.emplace_back([&, t] {
      tids[t] = trace.this_thread();
      for (int i = 0; i < 1000; ++i) TraceSpan s(&trace, TraceLevel::kAll, "work", "test");
    });
  }
  for (auto& t : threads) t.join();
  std::set<std::uint32_t> distinct(tids.begin(), tids.end());
  distinct.insert(main_tid);
  CHECK(distinct.size() == 5);
  const std::uint32_t track = trace.track("chunks <-> server 0");
  CHECK(distinct.count(track) == 0);
  CHECK(trace.track("chunks <-> server 0") == track);
  CHECK(trace.size() == 4000);
  const JsonValue json = parse_json(trace.to_json(), "to_json");
  CHECK(pstrain::report::check_trace(json).empty());
  std::set<std::int64_t> seen;
  for (const JsonValue* e : spans_of(json)) seen.insert(e->find("tid")->as_integer("tid"));
  CHECK(seen.size() == 4);
}

TEST_CASE("dynamic names are interned; names with quotes are escaped") {
  TraceRecorder trace(TraceLevel::kSteps, kClock);
  const char* a = trace.intern(std::string("barrier \"x\""));
  CHECK(a == trace.intern("barrier \"x\""));
  trace.record(trace.this_thread(), a, "scheduler", 10, 5);
  const JsonValue json = parse_json(trace.to_json(), "to_json");
  CHECK(name_of(spans_of(json).at(0)) == "barrier \"x\"");
}

TEST_CASE("check_trace finds partial overlap and time going back on a thread") {
  auto span = [](int tid, int ts, int dur) {
    return "{\"ph\":\"X\",\"pid\":1,\"tid\":" + std::to_string(tid) + ",\"name\":\"s\",\"ts\":" + std::to_string(ts) +
           ",\"dur\":" + std::to_string(dur) + "}";
  };
  auto trace = [](const std::vector<std::string>& events) {
    std::string text = "{\"traceEvents\":[";
    for (std::size_t i = 0; i < events.size(); ++i) text += (i ? "," : "") + events[i];
    return parse_json(text + "]}", "test");
  };
  // Nested, adjacent, and another thread overlapping freely: fine.
  CHECK(pstrain::report::check_trace(trace({span(1, 0, 10), span(1, 2, 3), span(1, 5, 5), span(1, 10, 1),
                                            span(2, 4, 20)}))
            .empty());
  const auto overlap = pstrain::report::check_trace(trace({span(1, 0, 10), span(1, 5, 10)}));
  REQUIRE(overlap.size() == 1);
  CHECK(overlap[0].find("ends after") != std::string::npos);
  const auto back = pstrain::report::check_trace(trace({span(1, 5, 1), span(1, 2, 1)}));
  REQUIRE(back.size() == 1);
  CHECK(back[0].find("before the previous") != std::string::npos);
}

TEST_CASE("merge_trace orders processes scheduler, servers, workers and skips a corrupt part, naming it") {
  report_test::TempDir dir;
  const auto trace_dir = dir.path() / "trace";
  auto part = [&](const std::string& role, int rank, int spans) {
    TraceRecorder t(TraceLevel::kSteps, kClock);
    t.set_process(role, rank);
    for (int i = 0; i < spans; ++i) t.record(t.this_thread(), "step", role == "worker" ? "worker" : "x", 100 * i, 50);
    t.write(trace_dir);
  };
  part("worker", 1, 3);
  part("server", 0, 2);
  part("worker", 0, 4);
  part("scheduler", -1, 1);
  report_test::write_file(trace_dir / "worker-2.json", "{\"traceEvents\":[{\"ph\":\"X\",");  // cut off

  const pstrain::report::TraceMergeResult r = pstrain::report::merge_trace(dir.path());
  CHECK(r.parts == 4);
  CHECK(r.events == 10);
  REQUIRE(r.errors.size() == 1);
  CHECK(r.errors[0].find("worker-2.json") != std::string::npos);
  REQUIRE(r.output == dir.path() / "trace.json");

  const JsonValue merged = parse_json(report_test::read_file(r.output), "trace.json");
  CHECK(pstrain::report::check_trace(merged).empty());
  std::vector<std::string> order;
  for (const JsonValue& e : merged.find("traceEvents")->items()) {
    if (e.find("name")->as_string("n") == "process_name") {
      CHECK(e.find("pid")->as_integer("pid") == static_cast<std::int64_t>(order.size() + 1));
      order.push_back(e.find("args")->find("name")->as_string("n"));
    }
  }
  CHECK(order == std::vector<std::string>{"scheduler", "server 0", "worker 0", "worker 1"});
  const JsonValue& other = *merged.find("otherData");
  CHECK(other.find("processes")->items().size() == 4);
  CHECK(other.find("skipped_parts")->items().size() == 1);
}

TEST_CASE("merge_trace with no parts writes nothing; an off recorder writes no part") {
  report_test::TempDir dir;
  TraceRecorder off(TraceLevel::kOff, kClock);
  off.set_process("worker", 0);
  off.write(dir.path() / "trace");
  CHECK_FALSE(std::filesystem::exists(dir.path() / "trace" / "worker-0.json"));
  const auto r = pstrain::report::merge_trace(dir.path());
  CHECK(r.parts == 0);
  CHECK(r.output.empty());
  CHECK_FALSE(std::filesystem::exists(dir.path() / "trace.json"));
}

TEST_CASE("TraceFileGuard writes the part when the scope is left by an exception") {
  report_test::TempDir dir;
  TraceRecorder trace(TraceLevel::kSteps, kClock);
  trace.set_process("server", 1);
  try {
    const pstrain::TraceFileGuard guard(trace, dir.path() / "trace");
    TraceSpan s(&trace, TraceLevel::kSteps, "step", "worker");
    throw std::runtime_error("failed mid-step");
  } catch (const std::runtime_error&) {
  }
  const auto file = dir.path() / "trace" / "server-1.json";
  REQUIRE(std::filesystem::exists(file));
  const JsonValue json = parse_json(report_test::read_file(file), file.string());
  REQUIRE(spans_of(json).size() == 1);  // the span ended by the unwinding is in it
}
