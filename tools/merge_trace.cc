// merge_trace: merges a run's per-process timelines RUN_DIR/trace/*.json into
// RUN_DIR/trace.json (what the launcher does after every job), for runs
// started by hand, by SLURM or mpirun. Then checks the result (spans nest and
// start in order per thread) and says what it wrote.
//
//   merge_trace RUN_DIR
//
// Exit codes: 0 merged (and well formed); 1 a part was skipped, the result
// is malformed, or there was nothing to merge.
#include <cstdio>
#include <fstream>
#include <sstream>

#include <CLI/CLI.hpp>

#include "tools/report/trace_merge.h"

int main(int argc, char** argv) {
  CLI::App app{"merge_trace: merge RUN_DIR/trace/*.json into RUN_DIR/trace.json (Chrome trace format)"};
  std::string run_dir;
  app.add_option("run_dir", run_dir, "the run directory")->required();
  CLI11_PARSE(app, argc, argv);
  try {
    const pstrain::report::TraceMergeResult r = pstrain::report::merge_trace(run_dir);
    for (const std::string& e : r.errors) std::fprintf(stderr, "merge_trace: %s\n", e.c_str());
    if (r.output.empty()) {
      std::fprintf(stderr, "merge_trace: no usable trace part in %s/trace\n", run_dir.c_str());
      return 1;
    }
    std::ifstream in(r.output);
    std::stringstream text;
    text << in.rdbuf();
    const auto problems = pstrain::report::check_trace(pstrain::report::parse_json(text.str(), r.output.string()));
    for (const std::string& p : problems) std::fprintf(stderr, "merge_trace: %s: %s\n", r.output.c_str(), p.c_str());
    std::printf("%s: %d process(es), %lld spans, %lld dropped at the cap\n", r.output.c_str(), r.parts,
                static_cast<long long>(r.events), static_cast<long long>(r.dropped_events));
    return r.errors.empty() && problems.empty() ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "merge_trace: %s\n", e.what());
    return 1;
  }
}
