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

#include "common/json_line.h"
#include "common/log.h"

namespace pstrain {

class MetricsWriter {
 public:
  // An empty run_dir writes nothing (tests, benchmarks).
  MetricsWriter(const std::string& run_dir, const std::string& file_name);
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;

  // Seconds since construction (the time base of every record).
  double elapsed_s() const;
  void write(const JsonLine& line);
  const std::string& path() const { return path_; }
  // Where the one "incomplete" warning goes (default: stderr, unprefixed).
  void set_log(Logger* log) { log_ = log; }
  // Whether a write failed (the file ends before the run did).
  bool incomplete() const { return incomplete_; }

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
  Logger* log_ = nullptr;
  bool incomplete_ = false;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

// Creates a directory and its parents; throws Error naming it on failure.
void make_directories(const std::string& path);

}  // namespace pstrain
