// A worker's metrics file: run_dir/metrics/worker-<rank>.jsonl, one JSON
// object per line (format in docs/run_directory.md). Lines are flushed as
// written, so a crashed run keeps everything up to its last step. Every
// write is checked: at the first that fails (a full disk), the writer says
// once, on the node's log, that the file is incomplete from that record on,
// and writes no more (a file with holes would read as a whole one).
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "common/base/job_clock.h"
#include "common/base/json_line.h"
#include "common/base/log.h"

namespace pstrain {

class MetricsWriter {
 public:
  // An empty run_dir writes nothing (tests, benchmarks).
  MetricsWriter(const std::string& run_dir, const std::string& file_name);
  // Resume (a checkpoint's worker part): the file is cut back to `keep_bytes`
  // (its size when the checkpoint was taken: the records of steps after it
  // are taken again; -1 = not cut) and appended to; elapsed_s() goes on from `time_offset_s`.
  MetricsWriter(const std::string& run_dir, const std::string& file_name, std::int64_t keep_bytes,
                double time_offset_s);
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;

  // Seconds since construction (the time base of every record).
  double elapsed_s() const;
  // Seconds on the job clock (PSTRAIN_JOB_START_US; common/base/job_clock.h).
  double job_s() const { return clock_.now_s(); }
  void write(const JsonLine& line);
  const std::string& path() const { return path_; }
  // Where the one "incomplete" warning goes (default: stderr, unprefixed).
  void set_log(Logger* log) { log_ = log; }
  // Whether a write failed (the file ends before the run did).
  bool incomplete() const { return incomplete_; }
  // Bytes in the file so far (0 when writing nothing).
  std::int64_t size() const;

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
  Logger* log_ = nullptr;
  bool incomplete_ = false;
  std::int64_t written_bytes_ = 0;  // once incomplete: the size before the failed write
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  double time_offset_s_ = 0.0;
  JobClock clock_ = JobClock::from_environment();
};

// Creates a directory and its parents; throws Error naming it on failure.
void make_directories(const std::string& path);

}  // namespace pstrain
