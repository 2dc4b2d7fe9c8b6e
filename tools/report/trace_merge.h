// The job's timeline: merges the per-process parts RUN_DIR/trace/*.json
// (written by common/observe/trace.h's TraceRecorder) into RUN_DIR/trace.json, one
// Chrome trace event file that Perfetto (ui.perfetto.dev) and chrome://tracing
// open. The launcher calls merge_trace() after every job (success or
// failure); build/bin/merge_trace RUN_DIR does it by hand (SLURM, by-hand
// launches). Format: docs/run_directory.md.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "tools/report/json_value.h"

namespace pstrain::report {

struct TraceMergeResult {
  int parts = 0;                    // parts merged
  std::int64_t events = 0;          // spans ("ph":"X") in trace.json
  std::int64_t dropped_events = 0;  // spans the processes dropped at their cap
  std::vector<std::string> errors;  // parts skipped, each "FILE: why"
  std::filesystem::path output;     // trace.json; empty when there was nothing to merge
};

// Merges every RUN_DIR/trace/*.json. Processes get pids in the order
// scheduler, servers, workers (by rank); their events keep their thread ids.
// A part that cannot be read or is not a valid trace is skipped and named in
// `errors`; the others are still merged. Writes nothing when no part was
// usable. Throws Error only when trace.json cannot be written.
TraceMergeResult merge_trace(const std::filesystem::path& run_dir);

// Checks a Chrome trace (parsed trace.json or part): every "X" event has a
// numeric ts >= 0 and dur >= 0, per (pid, tid) the start times are
// non-decreasing in file order, and spans of one thread nest (none starts
// inside another and ends after it). Returns one line per problem (at most
// `max_problems`); empty when well formed.
std::vector<std::string> check_trace(const JsonValue& trace, std::size_t max_problems = 20);

}  // namespace pstrain::report
