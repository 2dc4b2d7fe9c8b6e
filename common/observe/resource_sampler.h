// Resource use of one process over time: a background thread that every
// interval appends a row to a CSV file (RUN_DIR/metrics/resources-<role>-<rank>.csv,
// docs/run_directory.md), flushed at once so the file can be tailed while
// the job runs, and one last row when it stops.
//
// Columns (empty cell = not measured in this process):
//   time_s              job clock (common/base/job_clock.h): seconds since the job's origin
//   cpu_user_s          CPU time in user mode, all threads, cumulative (getrusage)
//   cpu_system_s        CPU time in the kernel, all threads, cumulative
//   cpu_percent         (user + system) over the wall time since the previous row
//                       (the first row: since the sampler started); 100 = one core busy;
//                       empty when that was under 10 ms (a last row right after another)
//   rss_bytes           resident set size now (/proc/self/statm)
//   bytes_sent          pstrain messages sent, cumulative (common/observe/traffic_counters.h)
//   bytes_received      pstrain messages received, cumulative
//   collective_bytes    allreduce workers: bytes handed to allreduce/broadcast, cumulative
//   gpu_util_percent    CUDA workers, through NVML: the GPU's utilization (whole device)
//   gpu_mem_used_bytes  device memory in use (whole device)
//   gpu_power_w         board power draw
//
// One sampler per process, created by its main (no global one). Stopping
// (stop() or the destructor) wakes the thread at once: no sleep delays the
// process's exit.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include "common/config/config.h"
#include "common/base/job_clock.h"
#include "common/base/log.h"
#include "common/observe/nvml_gpu.h"
#include "common/observe/traffic_counters.h"

namespace pstrain {

// The CSV header line (without the newline).
inline constexpr const char* kResourceCsvHeader =
    "time_s,cpu_user_s,cpu_system_s,cpu_percent,rss_bytes,bytes_sent,bytes_received,collective_bytes,"
    "gpu_util_percent,gpu_mem_used_bytes,gpu_power_w";

// This process's CPU times and resident set size now; rss_bytes is -1 when
// /proc/self/statm cannot be read.
struct ProcessUsage {
  double cpu_user_s = 0;
  double cpu_system_s = 0;
  std::int64_t rss_bytes = -1;
};
ProcessUsage read_process_usage();

struct ResourceSamplerOptions {
  std::filesystem::path file;                    // the CSV (parent directories are created)
  std::chrono::milliseconds interval{1000};      // > 0
  const TrafficCounters* traffic = nullptr;      // null: empty byte cells; else must outlive the sampler
  bool collective = false;                       // fill collective_bytes (allreduce workers)
  int cuda_device = -1;                          // CUDA device to sample through NVML; -1: none
  const char* nvml_library = NvmlGpu::kDefaultLibrary;
};

class ResourceSampler {
 public:
  // Creates the file with its header and starts sampling. Throws Error when
  // the file cannot be created. Logs one line: what it samples, and for a
  // CUDA device without NVML, why its GPU cells stay empty.
  ResourceSampler(ResourceSamplerOptions options, JobClock clock, Logger& log);
  ~ResourceSampler();
  ResourceSampler(const ResourceSampler&) = delete;
  ResourceSampler& operator=(const ResourceSampler&) = delete;

  // Writes the last row and stops the thread; later calls do nothing.
  void stop();

  const std::filesystem::path& file() const { return options_.file; }
  // Whether GPU cells are filled (NVML opened the device).
  bool samples_gpu() const { return gpu_ != nullptr; }
  // Why the GPU cells are empty for a CUDA device ("" otherwise).
  const std::string& gpu_note() const { return gpu_note_; }

 private:
  using Steady = std::chrono::steady_clock;
  void loop();
  void write_row();  // only the sampling thread, or stop() after joining it

  ResourceSamplerOptions options_;
  JobClock clock_;
  Logger& log_;
  std::unique_ptr<NvmlGpu> gpu_;
  std::string gpu_note_;
  std::FILE* out_ = nullptr;
  bool write_failed_ = false;
  Steady::time_point last_time_;
  double last_cpu_s_ = 0;

  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  bool stopped_ = false;
  std::thread thread_;
};

// A node's sampler: RUN_DIR/metrics/resources-<role>-<rank>.csv every
// output.resource_interval_ms; nullptr when that is 0 (off) or run_dir is
// empty. `cuda_device` >= 0 samples that GPU too.
std::unique_ptr<ResourceSampler> start_resource_sampler(const OutputConfig& output, std::string_view role, int rank,
                                                        const TrafficCounters* traffic, Logger& log,
                                                        int cuda_device = -1, bool collective = false);

// RUN_DIR/metrics/resources-<role>-<rank>.csv
std::filesystem::path resource_csv_path(const std::filesystem::path& run_dir, std::string_view role, int rank);

}  // namespace pstrain
