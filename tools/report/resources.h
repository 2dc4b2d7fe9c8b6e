// The resource samples of a run (RUN_DIR/metrics/resources-<role>-<rank>.csv,
// written by common/observe/resource_sampler.h; docs/run_directory.md) and their
// means and peaks per process for the summary.
//
// Reading is strict about what a file holds: a header naming every column,
// then rows with one cell per header column, each empty or a finite number
// (time_s and the CPU times never empty); anything else is a DataError naming
// "FILE:LINE" and the column. Extra columns are ignored (writers may add
// some). A last line without its newline is a row being written when the
// process stopped: it is left out. For the summary, read_run_resources()
// turns a bad or empty file into a warning and goes on without it, so that
// a process killed mid-write never costs the run its summary.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace pstrain::report {

struct ResourceSample {
  double time_s = 0;
  double cpu_user_s = 0;
  double cpu_system_s = 0;
  std::optional<double> cpu_percent;
  std::optional<double> rss_bytes;
  std::optional<double> bytes_sent;
  std::optional<double> bytes_received;
  std::optional<double> collective_bytes;
  std::optional<double> gpu_util_percent;
  std::optional<double> gpu_mem_used_bytes;
  std::optional<double> gpu_power_w;
};

struct ResourceSeries {
  std::string role;  // "scheduler" | "server" | "worker"
  int rank = 0;
  std::vector<ResourceSample> samples;
};

// Definitions (over one process's rows; empty when no row has the value):
//   duration_s           time_s of the last row - time_s of the first
//   cpu_s                user + system CPU seconds at the last row
//   cpu_percent_mean     100 x CPU seconds between the first and last rows /
//                        duration_s (one row: its cpu_percent); 100 = one core
//   cpu_percent_peak     the largest row's cpu_percent, or of 100 x the CPU seconds
//                        between two consecutive rows / their time apart (so
//                        never below the mean, whatever the rows' rounding)
//   rss_peak_bytes       the largest rss_bytes
//   bytes_sent/received  at the last row (cumulative: the process's total)
//   send/receive_bytes_per_s  bytes moved between the first and last rows / duration_s
//   collective_bytes     at the last row (allreduce workers)
//   gpu_util_percent_mean/peak, gpu_mem_used_peak_bytes, gpu_power_w_mean
//                        mean and largest over the rows that have them
struct ResourceSummary {
  std::string role;
  int rank = 0;
  int samples = 0;
  double duration_s = 0;
  double cpu_s = 0;
  std::optional<double> cpu_percent_mean;
  std::optional<double> cpu_percent_peak;
  std::optional<double> rss_peak_bytes;
  std::optional<double> bytes_sent;
  std::optional<double> bytes_received;
  std::optional<double> send_bytes_per_s;
  std::optional<double> receive_bytes_per_s;
  std::optional<double> collective_bytes;
  std::optional<double> gpu_util_percent_mean;
  std::optional<double> gpu_util_percent_peak;
  std::optional<double> gpu_mem_used_peak_bytes;
  std::optional<double> gpu_power_w_mean;

  bool has_gpu() const { return gpu_util_percent_peak || gpu_mem_used_peak_bytes || gpu_power_w_mean; }
};

// One file. Throws DataError ("FILE:LINE: ...") as described above.
ResourceSeries read_resource_csv(const std::filesystem::path& file, const std::string& role, int rank);

// Every metrics/resources-<role>-<rank>.csv of a run: the scheduler, then the
// servers and the workers by rank. Files that cannot be used (bad content,
// no rows, a name not of that form) are left out with one line each in
// `warnings`. No files (sampling off): empty.
std::vector<ResourceSeries> read_run_resources(const std::filesystem::path& run_dir,
                                               std::vector<std::string>& warnings);

// Needs at least one sample.
ResourceSummary summarize_resources(const ResourceSeries& series);

// The summary's JSON for one process: {"role": ..., "rank": ..., ...} with
// the fields above; "gpu" is null or {"util_percent_mean", "util_percent_peak",
// "mem_used_peak_bytes", "power_w_mean"}.
std::string resource_summary_json(const ResourceSummary& r);

}  // namespace pstrain::report
