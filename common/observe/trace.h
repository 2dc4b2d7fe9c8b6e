// The job timeline: spans ("complete events" of the Chrome trace event
// format) recorded by one process and written to RUN_DIR/trace/<role>-<rank>.json;
// the launcher merges the parts into RUN_DIR/trace.json (tools/report/trace_merge.h).
//
// One TraceRecorder per process (or per in-process node in tests), created
// in the role's main and handed by pointer to what records; a null pointer
// records nothing. Levels (output.trace):
//   off    nothing is recorded and no file is written;
//   steps  one span per training step and its phases (data, forward+backward,
//          pull wait, push / allreduce wait, update, eval);
//   all    adds each chunk's push and pull (chunk, server, bytes), every
//          server request (receive, finite check, sum, update, reply) and each
//          allreduce bucket.
// Timestamps are microseconds on the job clock (common/base/job_clock.h), so the
// parts of all processes share one time axis. A TraceSpan checks the level
// before it reads the clock: a filtered span costs a branch.
//
// Memory is bounded: at most max_events are kept (the first ones); later
// events are counted in dropped() and the count is written into the file
// ("otherData": {"dropped_events": N}). Recording a span takes one short
// mutex hold: the thread id lookup and a push_back into a deque, which grows
// without moving what it holds (tools/bench_trace.cc measures it). Names,
// categories and argument keys are `const char*` with static storage (string
// literals or intern()), so a recorded span allocates nothing beyond the deque.
// Thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <filesystem>
#include <initializer_list>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "common/base/job_clock.h"

namespace pstrain {

enum class TraceLevel { kOff = 0, kSteps = 1, kAll = 2 };
// "off" | "steps" | "all"; throws ConfigError otherwise.
TraceLevel parse_trace_level(std::string_view name);
std::string_view to_string(TraceLevel level);

struct TraceArg {
  const char* key = nullptr;
  std::int64_t value = 0;
};

struct TraceEvent {
  static constexpr int kMaxArgs = 4;
  const char* name = nullptr;
  const char* cat = nullptr;
  std::int64_t ts_us = 0;   // start on the job clock
  std::int64_t dur_us = 0;  // >= 0
  std::uint32_t tid = 0;
  int num_args = 0;
  TraceArg args[kMaxArgs];
};

class TraceRecorder {
 public:
  static constexpr std::size_t kDefaultMaxEvents = std::size_t{1} << 19;  // ~50 MB at most

  explicit TraceRecorder(TraceLevel level, JobClock clock = JobClock::from_environment(),
                         std::size_t max_events = kDefaultMaxEvents);
  TraceRecorder(const TraceRecorder&) = delete;
  TraceRecorder& operator=(const TraceRecorder&) = delete;

  TraceLevel level() const { return level_; }
  // Whether spans of level `at` (kSteps or kAll) are recorded.
  bool enabled(TraceLevel at) const { return level_ != TraceLevel::kOff && at <= level_; }
  const JobClock& clock() const { return clock_; }
  std::int64_t now_us() const { return clock_.now_us(); }

  // Who this process is: process_name "worker 0", file "worker-0.json".
  // rank < 0 (not known yet): "worker", "worker-pid<PID>.json"; the
  // scheduler (one per job) is "scheduler", "scheduler.json".
  void set_process(std::string role, int rank);
  std::string process_label() const;
  std::string file_name() const;

  // The calling thread's id in this trace (1, 2, ... in order of first use).
  std::uint32_t this_thread();
  // Names the calling thread ("main", "allreduce"); the last name given wins.
  void name_this_thread(std::string name);
  // A track that is no OS thread (e.g. the replies from one server), shown as
  // a thread named `name`; the same name gives the same id. Its user makes
  // sure its spans do not partially overlap.
  std::uint32_t track(const std::string& name);
  // A copy of `text` that lives as long as the recorder, for dynamic names.
  const char* intern(std::string_view text);

  // Records a finished span (dropped, and counted, beyond max_events).
  void record(const TraceEvent& event);
  // record() with event.tid = this_thread(), under one lock (TraceSpan's path).
  void record_on_this_thread(TraceEvent event);
  void record(std::uint32_t tid, const char* name, const char* cat, std::int64_t ts_us, std::int64_t dur_us,
              std::initializer_list<TraceArg> args = {});

  std::size_t size() const;
  std::int64_t dropped() const;
  // The events sorted by start (longer first on ties: parents before children).
  std::vector<TraceEvent> events() const;

  // The Chrome trace JSON of this process: {"traceEvents": [metadata, spans
  // one per line], "displayTimeUnit": "ms", "otherData": {...}} with pid = the
  // OS process id.
  std::string to_json() const;
  // Writes to_json() to dir/file_name() (atomically, creating dir). Nothing
  // when the level is off. Throws Error naming the file.
  void write(const std::filesystem::path& dir) const;
  // write() that logs instead of throwing, for destructors and error paths;
  // returns the error text ("" when written or off).
  std::string write_noexcept(const std::filesystem::path& dir) const noexcept;

 private:
  struct Thread {
    std::thread::id os_id;  // default-constructed for tracks
    std::string name;
    std::uint32_t tid;
  };
  std::uint32_t thread_locked(std::thread::id id);

  TraceLevel level_;
  JobClock clock_;
  std::size_t max_events_;
  mutable std::mutex mutex_;
  std::string role_ = "process";
  int rank_ = -1;
  std::vector<Thread> threads_;
  std::deque<TraceEvent> events_;  // grows without moving what it holds
  std::int64_t dropped_ = 0;
  std::deque<std::string> interned_;
};

// A span on the calling thread from construction to end() or destruction.
// Inactive (no clock read, nothing recorded) when `trace` is null or does not
// record `at`. Spans of one thread must nest: end inner spans first (RAII
// scopes do that).
class TraceSpan {
 public:
  TraceSpan(TraceRecorder* trace, TraceLevel at, const char* name, const char* cat)
      : trace_(trace != nullptr && trace->enabled(at) ? trace : nullptr) {
    if (trace_ == nullptr) return;
    event_.name = name;
    event_.cat = cat;
    event_.ts_us = trace_->now_us();
  }
  ~TraceSpan() { end(); }
  TraceSpan(const TraceSpan&) = delete;
  TraceSpan& operator=(const TraceSpan&) = delete;

  bool active() const { return trace_ != nullptr; }
  // Adds an argument (at most TraceEvent::kMaxArgs; more are ignored).
  TraceSpan& arg(const char* key, std::int64_t value) {
    if (trace_ != nullptr && event_.num_args < TraceEvent::kMaxArgs) event_.args[event_.num_args++] = {key, value};
    return *this;
  }
  void rename(const char* name) { event_.name = name; }
  // Records the span now (once).
  void end() {
    if (trace_ == nullptr) return;
    event_.dur_us = trace_->now_us() - event_.ts_us;
    if (event_.dur_us < 0) event_.dur_us = 0;  // the wall clock stepped back
    trace_->record_on_this_thread(event_);
    trace_ = nullptr;
  }
  // Drops the span unrecorded.
  void cancel() { trace_ = nullptr; }

 private:
  TraceRecorder* trace_;
  TraceEvent event_;
};

// Writes the recorder's part file when it goes out of scope, also when an
// exception unwinds the role's main (a failed job's timeline is kept), and
// when the process is ended by SIGTERM or SIGINT: every live guard is in a
// process-wide list that write_live_trace_files() writes (guarded_main's
// signal thread calls it, common/node/node_cli.h). The two writes of one
// guard never overlap (one lock); a part written at a signal is rewritten,
// whole, if the scope still ends.
class TraceFileGuard {
 public:
  TraceFileGuard(const TraceRecorder& trace, std::filesystem::path dir);
  ~TraceFileGuard();
  TraceFileGuard(const TraceFileGuard&) = delete;
  TraceFileGuard& operator=(const TraceFileGuard&) = delete;

  // write_noexcept() of the part; "" when written (or the level is off).
  std::string write_now() const noexcept { return dir_.empty() ? "" : trace_.write_noexcept(dir_); }

 private:
  const TraceRecorder& trace_;
  std::filesystem::path dir_;
};

// Writes the part of every TraceFileGuard alive now (a process ended by a
// signal); returns the errors, one line each ("" parts written or off).
std::vector<std::string> write_live_trace_files() noexcept;

// RUN_DIR/trace, where each process writes its part ("" run dir: none).
std::filesystem::path trace_dir(const std::string& run_dir);

}  // namespace pstrain
