// A worker's metrics file: run_dir/metrics/worker-<rank>.jsonl, one JSON
// object per line (format in docs/run_directory.md). Lines are flushed as
// written, so a crashed run keeps everything up to its last step.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "common/json_line.h"

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

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

// Creates a directory and its parents; throws Error naming it on failure.
void make_directories(const std::string& path);

}  // namespace pstrain
