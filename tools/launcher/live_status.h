// The launcher's live status (tools/launcher/status_line.h) while a job
// runs: it tails run_dir/metrics/worker-<w>.jsonl and shows the status
//  - on a terminal: one line redrawn in place about twice a second
//    ("\r" + erase line); hide() erases it before anything else is written
//    and the next tick() draws it again, so other lines never mix with it;
//    finish() leaves the final state as a normal line;
//  - otherwise: a plain line every interval_s seconds, and one at finish().
// Driven by the launcher's poll loop (tick() after every wake-up); it never
// blocks. Single-threaded.
// Besides the metrics it learns from the launcher what only the launcher
// knows (set_worker_state: a worker dropped or restarting) and reads the
// nodes' output lines (node_line): the scheduler's "registered 2/2 servers
// and 1/2 workers" (the phase until the first step) and a checkpoint's
// "checkpoint step-N: wrote" lines. With `resume`, the metrics files' lines
// written before this launch give only the plan: no stale progress.
// It also tails the scheduler's records (metrics/scheduler.jsonl,
// scheduler/job_records.h): a joiner whose join was abandoned shows as
// "wR join abandoned" until a later process joins that slot.
#pragma once

#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/base/job_clock.h"
#include "tools/launcher/metrics_tail.h"

namespace pstrain::launcher {

struct LiveStatusOptions {
  std::filesystem::path run_dir;
  int num_workers = 0;
  bool async = false;
  std::FILE* out = stdout;
  bool terminal = false;     // redraw in place; else plain lines
  double interval_s = 10;    // plain lines: how often; <= 0: no status at all
  double redraw_s = 0.5;     // terminal: how often
  double window_s = 10;      // the recent window of the rates
  JobClock clock = JobClock::from_environment();
  bool resume = false;       // launch --resume: the files' earlier lines are the interrupted run's
};

class LiveStatus {
 public:
  explicit LiveStatus(LiveStatusOptions options);

  bool enabled() const { return options_.interval_s > 0; }
  // Reads new records and draws or prints when it is time.
  void tick();
  // Terminal: erases the drawn line (call before writing anything else).
  void hide();
  // The last state: a normal line on the terminal, a last plain line
  // otherwise, saying "done" and, unless `ending` is empty, how it ended
  // ("interrupted", "failed"). Once.
  void finish(const std::string& ending = "");
  // Worker `rank` was dropped, or is restarting (until its "rejoin" record).
  void set_worker_state(int rank, WorkerStatus::State state);
  // Shows worker slots up to `rank` too (a joiner past cluster.workers).
  void track_worker(int rank);
  // A joiner the launcher started into slot `rank` now: tracked, and live
  // again if an earlier join into it was abandoned (a record of an
  // abandonment from before now is about that earlier process).
  void start_joiner(int rank);
  // Whether worker `rank`'s "end" record says it retired (a membership change left it out).
  bool retired(int rank);
  // A line node `node` ("scheduler", "server 0") wrote.
  void node_line(const std::string& node, std::string_view line);

  StatusSnapshot snapshot() const;

 private:
  void poll();
  void take_scheduler_record(const std::string& line);
  std::size_t width() const;
  void write(const std::string& text);

  LiveStatusOptions options_;
  std::vector<MetricsTail> tails_;
  std::vector<WorkerProgress> workers_;
  std::vector<WorkerStatus::State> states_;
  std::vector<int> rejoins_at_restart_;  // rejoin records read when it began restarting
  MetricsTail scheduler_records_;        // metrics/scheduler.jsonl: abandoned joins
  std::vector<double> tracked_at_s_;     // job clock: when track_worker last (re)started the slot
  std::string phase_;
  std::optional<std::int64_t> checkpoint_step_;
  std::optional<std::string> ending_;
  double next_poll_s_ = 0;
  double next_line_s_ = 0;
  bool drawn_ = false;
  bool finished_ = false;
  std::string last_;  // what is drawn
};

}  // namespace pstrain::launcher
