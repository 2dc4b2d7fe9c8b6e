// Reading the workers' metrics files while they are written: MetricsTail
// hands on the complete lines appended to a file since the last read (a
// line the worker has only half written waits for its '\n'); WorkerProgress
// turns one worker's records into its WorkerStatus for the status line.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tools/launcher/status_line.h"

#include "common/base/appended_lines.h"

namespace pstrain::launcher {

// A metrics file's new lines (common/base/appended_lines.h); a line over 1 MiB is no record.
class MetricsTail {
 public:
  explicit MetricsTail(std::filesystem::path file) : lines_(std::move(file)) {}

  // The complete lines appended since the last call; none while the file
  // does not exist. A file that shrank (rewritten) is read from its start.
  std::vector<std::string> read_lines() { return lines_.read(); }
  // Passes over what the file holds now (a resumed run's earlier lines).
  void skip_existing() { lines_.skip_existing(); }

 private:
  AppendedLines lines_;
};

class WorkerProgress {
 public:
  explicit WorkerProgress(int rank, double window_s = 10.0) : rank_(rank), window_(window_s) {}

  // One line of metrics/worker-<rank>.jsonl, read at `read_s` on the job
  // clock. "plan", "step", "eval", "resume" and "end" records count; other
  // types, and lines that are not JSON or lack a field, are skipped (counted
  // in bad_lines()). A "resume" record starts the progress anew from its
  // step (the resumed process goes on from the checkpoint).
  void add_line(std::string_view line, double read_s);
  // A line written before this launch (launch --resume: the interrupted
  // run's): only its plan counts (a resumed worker writes none), none of its
  // progress, which the resumed run redoes from its checkpoint.
  void add_history_line(std::string_view line);

  // The exponential moving average's weight of a new step's loss.
  static constexpr double kLossWeight = 0.2;

  // Its status at `now_s` on the job clock. The worker's record times are on
  // its own clock (seconds since it started training); the offset between
  // the two is estimated as the smallest (read time - record time) seen.
  WorkerStatus status(double now_s) const;
  int bad_lines() const { return bad_lines_; }
  int rejoins() const { return rejoins_; }  // "rejoin" records read: a new process took the rank back

 private:
  int rank_;
  StepWindow window_;
  std::int64_t total_steps_ = -1;
  std::int64_t end_steps_ = -1;
  bool retired_ = false;  // the "end" record's retired
  std::int64_t resumed_steps_ = 0;
  int rejoins_ = 0;  // the step a "resume" record went on from
  std::int64_t epoch_ = -1;
  std::int64_t epochs_ = -1;
  std::int64_t workers_ = -1;  // the latest plan record's "workers", if one had it
  std::string workers_reason_;  // and its "reason" (elastic membership: "ctl", "join", "retire")
  std::optional<double> loss_ema_;
  std::optional<double> test_accuracy_;
  bool have_offset_ = false;
  double offset_s_ = 0;
  int bad_lines_ = 0;
};

}  // namespace pstrain::launcher
