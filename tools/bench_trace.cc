// The cost of one TraceSpan (common/observe/trace.h) on this machine: nanoseconds per
// span, the median of --repeats timed batches of --spans spans, for
//   filtered   a kAll span on a "steps" recorder: the level check only
//   off        a span on an "off" recorder
//   recorded   a kSteps span with two arguments that is kept (clock reads,
//              thread id and push_back, each under the recorder's mutex)
//   recorded xT the same from T threads at once into one recorder (the mutex
//              contended), per span of one thread
// Each batch uses a fresh recorder whose cap holds every span, so no span is
// dropped; its memory is touched for the first time, so a large --spans
// includes the page faults of a growing recorder (a small one mostly not). Compare with the spans per step in docs/run_directory.md to bound
// the timeline's cost per training step.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/observe/trace.h"

namespace {

using pstrain::TraceLevel;
using pstrain::TraceRecorder;
using pstrain::TraceSpan;
using Clock = std::chrono::steady_clock;

void spans(TraceRecorder& trace, TraceLevel at, int n) {
  for (int i = 0; i < n; ++i) {
    TraceSpan span(&trace, at, "bench", "bench");
    span.arg("i", i).arg("n", n);
  }
}

// ns per span of one thread, the median over `repeats` batches.
double measure(TraceLevel recorder_level, TraceLevel span_level, int threads, int n, int repeats) {
  std::vector<double> ns;
  for (int r = 0; r < repeats; ++r) {
    TraceRecorder trace(recorder_level, pstrain::JobClock::from_environment(), static_cast<std::size_t>(n) * static_cast<std::size_t>(threads));
    const auto t0 = Clock::now();
    std::vector<std::thread> pool;
    for (int t = 1; t < threads; ++t) pool.emplace_back([&] { spans(trace, span_level, n); });
    spans(trace, span_level, n);
    for (std::thread& t : pool) t.join();
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (recorder_level != TraceLevel::kOff && span_level <= recorder_level &&
        trace.size() != static_cast<std::size_t>(n) * static_cast<std::size_t>(threads)) {
      std::fprintf(stderr, "bench_trace: recorded %zu spans, expected %d\n", trace.size(), n * threads);
    }
    ns.push_back(1e9 * s / n);
  }
  std::sort(ns.begin(), ns.end());
  return ns[ns.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_trace: nanoseconds per trace span (common/observe/trace.h)"};
  int n = 200000, repeats = 7;
  app.add_option("--spans", n, "spans per timed batch and thread")->check(CLI::PositiveNumber);
  app.add_option("--repeats", repeats, "timed batches (the median is shown)")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  std::printf("| span | ns per span |\n|---|---|\n");
  std::printf("| filtered (kAll span, \"steps\" recorder) | %.1f |\n", measure(TraceLevel::kSteps, TraceLevel::kAll, 1, n, repeats));
  std::printf("| off recorder | %.1f |\n", measure(TraceLevel::kOff, TraceLevel::kSteps, 1, n, repeats));
  std::printf("| recorded, 1 thread | %.1f |\n", measure(TraceLevel::kAll, TraceLevel::kSteps, 1, n, repeats));
  std::printf("| recorded, 2 threads at once | %.1f |\n", measure(TraceLevel::kAll, TraceLevel::kSteps, 2, n, repeats));
  return 0;
}
