// The parameter-server worker's copy pipeline in real runs (launcher, scheduler,
// servers, workers): the copy stream's spans on their own track, every
// chunk's push sent only after its download ended; on the CPU, float32 pulls
// written straight into the model (no upload), bfloat16 narrowed and widened
// by the copy thread with half the bytes (worker/client/copy_pipeline.h,
// docs/architecture.md).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <map>
#include <utility>
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
      for (const char* key : {"chunk", "first_chunk", "chunks", "bytes", "offset", "elems", "step"}) {
        if (const JsonValue* v = args->find(key); v != nullptr) s.args[key] = v->as_integer(key);
      }
    }
    out[threads[{pid, tid}]].push_back(s);
  }
  return out;
}

// Per chunk: its downloads and uploads (count, and the bytes of the last one).
struct Copies {
  std::map<std::int64_t, int> downloads, uploads;
  std::map<std::int64_t, std::int64_t> download_bytes, upload_bytes;
};

Copies copies_of(const std::vector<Span>& spans) {
  Copies c;
  for (const Span& s : spans) {
    REQUIRE(s.args.count("chunk") == 1);
    REQUIRE(s.args.count("bytes") == 1);
    REQUIRE((s.name == "download" || s.name == "upload"));
    const std::int64_t k = s.args.at("chunk");
    (s.name == "download" ? c.downloads : c.uploads)[k]++;
    (s.name == "download" ? c.download_bytes : c.upload_bytes)[k] = s.args.at("bytes");
  }
  return c;
}

// Every chunk of a push was downloaded, and that download had ended, before the push was sent.
void check_pushes_after_downloads(std::map<std::string, std::vector<Span>>& threads, int steps) {
  REQUIRE(threads.count("communication") == 1);
  const std::vector<Span>& copies = threads["copy stream"];
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
}

struct TracedRun {
  JsonValue trace;
  double accuracy = 0.0;
};

TracedRun run_traced(const it::TempDir& dir, const std::string& name, const std::string& config,
                     const std::vector<std::string>& sets) {
  const auto run = dir.path() / name;
  auto args = it::launch_args(it::kSourceDir / "configs" / config, run);
  args.insert(args.end(), {"--set", "output.trace=all", "--quiet"});
  for (const std::string& s : sets) args.insert(args.end(), {"--set", s});
  const it::Result r = it::run_launch(args, dir.path());
  INFO(r.output);
  REQUIRE(r.exit.code == 0);
  const JsonValue summary = pstrain::report::parse_json(it::read_file(run / "summary.json"), "summary.json");
  const JsonValue* accuracy = summary.find("final_test_accuracy");  // null under simulated compute
  return {pstrain::report::parse_json(it::read_file(run / "trace.json"), "trace.json"),
          accuracy->is_null() ? std::nan("") : accuracy->as_number("final_test_accuracy")};
}

}  // namespace

TEST_CASE("copy pipeline in a sync run on the CPU: copy-stream spans, pushes after their downloads, no upload pass") {
  it::TempDir dir;
  const int steps = 4;
  const TracedRun run = run_traced(dir, "run", "tiny_sync.toml", {"workload.max_steps=" + std::to_string(steps)});
  for (const char* worker : {"worker 0", "worker 1"}) {
    CAPTURE(worker);
    auto threads = spans_of(run.trace, worker);
    REQUIRE(threads.count("copy stream") == 1);
    const Copies c = copies_of(threads["copy stream"]);
    REQUIRE_FALSE(c.downloads.empty());
    for (const auto& [chunk, n] : c.downloads) {
      CAPTURE(chunk);
      CHECK(n == steps);  // one download per chunk per step
    }
    // The pulls were written straight into the model's parameters: nothing to copy in.
    CHECK(c.uploads.empty());
    check_pushes_after_downloads(threads, steps);
    // The forward's waits for weights, per layer with parameters, on the training thread.
    int pull_waits = 0;
    for (const Span& s : threads["training"]) pull_waits += s.name == "pull wait" ? 1 : 0;
    CHECK(pull_waits >= steps);
  }
}

TEST_CASE("simulated compute in a sync run: each layer's forward waits for its own weights, in forward order") {
  it::TempDir dir;
  const int steps = 4;
  const TracedRun run = run_traced(dir, "run", "tiny_sync.toml",
                                   {"workload.max_steps=" + std::to_string(steps), "workload.simulated_step_ms=2"});
  // small_cnn's layers with parameters, in forward order: (offset, elements), as the flat layout has them.
  const std::vector<std::pair<std::int64_t, std::int64_t>> layers = {{0, 80}, {80, 1168}, {1248, 7850}};
  for (const char* worker : {"worker 0", "worker 1"}) {
    CAPTURE(worker);
    auto threads = spans_of(run.trace, worker);
    int computes = 0;
    for (const Span& compute : threads["training"]) {
      if (compute.name != "forward+backward") continue;
      ++computes;
      // The simulated step takes at least its stated time (absolute deadlines: not much more either, but
      // that bound is the unit test's, tests/worker/simulated_compute_test.cc).
      CHECK(compute.end - compute.ts >= 2000);
      std::vector<std::pair<std::int64_t, std::int64_t>> gates;
      for (const Span& s : threads["training"]) {
        if (s.name == "pull wait" && s.ts >= compute.ts && s.end <= compute.end) {
          gates.emplace_back(s.args.at("offset"), s.args.at("elems"));
        }
      }
      CHECK(gates == layers);  // before: one wait for every weight, (0, 9098)
    }
    CHECK(computes == steps);
  }
}

TEST_CASE("copy pipeline with bfloat16 on the wire on the CPU: the copy thread narrows and widens half the bytes; "
          "sync, async and ssp learn") {
  it::TempDir dir;
  const TracedRun reference = run_traced(dir, "float32", "tiny_sync.toml", {});
  const Copies wide = copies_of(spans_of(reference.trace, "worker 0")["copy stream"]);
  REQUIRE_FALSE(wide.downloads.empty());
  for (const std::string mode : {"sync", "async", "ssp"}) {
    CAPTURE(mode);
    std::vector<std::string> sets = {"ps.wire_dtype=bfloat16", "mode=" + mode};
    if (mode == "ssp") sets.push_back("ps.staleness_bound=2");
    if (const std::vector<std::string> rate = it::tiny_async_rate(mode); !rate.empty()) sets.push_back(rate[1]);
    const TracedRun run = run_traced(dir, "bfloat16_" + mode, "tiny_sync.toml", sets);
    for (const char* worker : {"worker 0", "worker 1"}) {
      CAPTURE(worker);
      auto threads = spans_of(run.trace, worker);
      REQUIRE(threads.count("copy stream") == 1);
      const Copies c = copies_of(threads["copy stream"]);
      REQUIRE(c.downloads.size() == wide.downloads.size());
      for (const auto& [chunk, n] : c.downloads) {
        CAPTURE(chunk);
        CHECK(n >= 16);  // every step (2 epochs of 16)
        CHECK(c.uploads.at(chunk) >= n);  // each step's pull, widened on the copy thread
        CHECK(2 * c.download_bytes.at(chunk) == wide.download_bytes.at(chunk));  // bfloat16: half of float32
        CHECK(c.upload_bytes.at(chunk) == c.download_bytes.at(chunk));
      }
      check_pushes_after_downloads(threads, 16);
    }
    MESSAGE(mode << " with bfloat16 on the wire: accuracy " << run.accuracy << " (float32 sync "
                 << reference.accuracy << ")");
    CHECK(run.accuracy > 0.5);  // it learned: chance is 0.1 on the 10 synthetic classes
    if (mode == "sync") CHECK(std::abs(run.accuracy - reference.accuracy) <= 0.1);
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
