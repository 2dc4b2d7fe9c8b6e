// The parameter-server worker's copy pipeline in real runs (launcher, scheduler,
// servers, workers): the copy stream's spans on their own track, every
// chunk's push sent only after its download ended, every chunk's weights
// uploaded each step (worker/client/copy_pipeline.h, docs/architecture.md).
#include <doctest/doctest.h>

#include <cstdlib>
#include <map>
#include <vector>

#include "common/observe/gpu_presence.h"
#include "tests/integration/launch_test_util.h"
#include "tests/support/skip.h"
#include "tools/report/json_value.h"

namespace {

using pstrain::report::JsonValue;

struct Span {
  std::string name;
  std::int64_t ts = 0, end = 0;
  std::map<std::string, std::int64_t> args;
};

// Spans of process `process` (e.g. "worker 0") by thread name.
std::map<std::string, std::vector<Span>> spans_of(const JsonValue& trace, const std::string& process) {
  std::map<std::int64_t, std::string> processes;
  std::map<std::pair<std::int64_t, std::int64_t>, std::string> threads;
  for (const JsonValue& e : trace.find("traceEvents")->items()) {
    if (e.find("ph")->as_string("ph") != "M") continue;
    const std::string name = e.find("name")->as_string("name");
    const std::int64_t pid = e.find("pid")->as_integer("pid"), tid = e.find("tid")->as_integer("tid");
    if (name == "process_name") processes[pid] = e.find("args")->find("name")->as_string("name");
    if (name == "thread_name") threads[{pid, tid}] = e.find("args")->find("name")->as_string("name");
  }
  std::map<std::string, std::vector<Span>> out;
  for (const JsonValue& e : trace.find("traceEvents")->items()) {
    if (e.find("ph")->as_string("ph") != "X") continue;
    const std::int64_t pid = e.find("pid")->as_integer("pid"), tid = e.find("tid")->as_integer("tid");
    if (processes[pid] != process) continue;
    Span s;
    s.name = e.find("name")->as_string("name");
    s.ts = e.find("ts")->as_integer("ts");
    s.end = s.ts + e.find("dur")->as_integer("dur");
    if (const JsonValue* args = e.find("args"); args != nullptr) {
      for (const char* key : {"chunk", "first_chunk", "chunks"}) {
        if (const JsonValue* v = args->find(key); v != nullptr) s.args[key] = v->as_integer(key);
      }
    }
    out[threads[{pid, tid}]].push_back(s);
  }
  return out;
}

}  // namespace

TEST_CASE("copy pipeline in a sync run: copy-stream spans, pushes after their downloads, uploads every step") {
  it::TempDir dir;
  const auto run = dir.path() / "run";
  const int steps = 4;
  auto args = it::launch_args(it::kSourceDir / "configs/tiny_sync.toml", run);
  args.insert(args.end(), {"--set", "output.trace=all", "--set", "workload.max_steps=" + std::to_string(steps),
                           "--quiet"});
  const it::Result r = it::run_launch(args, dir.path());
  INFO(r.output);
  REQUIRE(r.exit.code == 0);
  const JsonValue trace = pstrain::report::parse_json(it::read_file(run / "trace.json"), "trace.json");

  for (const char* worker : {"worker 0", "worker 1"}) {
    CAPTURE(worker);
    auto threads = spans_of(trace, worker);
    REQUIRE(threads.count("copy stream") == 1);
    const std::vector<Span>& copies = threads["copy stream"];
    std::map<std::int64_t, int> downloads, uploads;  // per chunk
    for (const Span& s : copies) {
      REQUIRE(s.args.count("chunk") == 1);
      CHECK((s.name == "download" || s.name == "upload"));
      (s.name == "download" ? downloads : uploads)[s.args.at("chunk")]++;
    }
    REQUIRE_FALSE(downloads.empty());
    for (const auto& [chunk, n] : downloads) {
      CAPTURE(chunk);
      CHECK(n == steps);  // one download per chunk per step
      // Each step's pull (the prefetch of the step after the last is waited
      // for at the end and uploaded too); worker 0's evaluation pulls again.
      CHECK(uploads[chunk] >= steps);
    }
    CHECK(uploads.size() == downloads.size());

    // Every chunk of a push was downloaded, and that download had ended, before the push was sent.
    REQUIRE(threads.count("communication") == 1);
    int pushes = 0;
    for (const Span& push : threads["communication"]) {
      if (push.name != "push send") continue;
      ++pushes;
      for (std::int64_t k = push.args.at("first_chunk"); k < push.args.at("first_chunk") + push.args.at("chunks"); ++k) {
        CAPTURE(k);
        const Span* last = nullptr;  // the chunk's latest download started before the push
        for (const Span& c : copies) {
          if (c.name == "download" && c.args.at("chunk") == k && c.ts <= push.ts) last = &c;
        }
        REQUIRE(last != nullptr);
        CHECK(last->end <= push.ts);
      }
    }
    CHECK(pushes >= steps);
    // The forward's waits for weights, per layer with parameters, on the training thread.
    int pull_waits = 0;
    for (const Span& s : threads["training"]) pull_waits += s.name == "pull wait" ? 1 : 0;
    CHECK(pull_waits >= steps);
  }
}

TEST_CASE("tools/gpu_check_pipeline.sh on a machine without a GPU: exits 77 saying so") {
  if (pstrain::probe_gpu_presence().driver) {
    return pstrain::test::skip_case("a GPU is present: the script runs its check instead");
  }
  it::TempDir dir;
  const std::string out = (dir.path() / "out.txt").string();
  const std::string command = "PSTRAIN_ROOT=" + it::kSourceDir.string() + " PSTRAIN_BIN=" + it::kBinDir.string() +
                              " bash " + (it::kSourceDir / "tools/gpu_check_pipeline.sh").string() + " > " + out +
                              " 2>&1";
  const int rc = std::system(command.c_str());
  const std::string text = it::read_file(out);
  INFO(text);
  REQUIRE(WIFEXITED(rc));
  CHECK(WEXITSTATUS(rc) == 77);
  CHECK(it::contains(text, "gpu_check_pipeline: no NVIDIA GPU on this host"));
  CHECK(it::contains(text, "skipped"));
}
