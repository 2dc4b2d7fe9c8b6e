// The launcher's live status line: what it shows (a snapshot of the
// workers' progress) and how it is drawn, as pure functions so they can be
// tested without a terminal.
//
//   [  12.345 status] step 340/1000 34% | epoch 2/3 | 28.0 steps/s | loss 0.4123 | acc 97.66% | ETA 24s | staleness 1.30 | w0 342 28.1/s | w1 dropped
//
// Only live workers count in the head: a dropped worker (the job went on
// without it) or one restarting (a new process is taking its rank back)
// shows as "w1 dropped" / "w1 restarting" and no longer holds the job's
// progress back; a joiner that failed before its boundary, whose join the
// scheduler abandoned, as "w2 join abandoned".
// step: the slowest live worker's steps of the total EpochDriver runs per
// worker, then " evaluating" once every live worker has run all its steps
// and not yet ended (the final evaluation); before the first records the
// phase ("registering 2/2 servers 1/2 workers") or "starting";
// epoch: the slowest live worker's epoch (1-based) of the planned epochs;
// steps/s: the slowest live worker's rate over the recent window (it sets the ETA);
// loss: the mean over live workers of each one's loss, an exponential
// moving average of its steps' losses (the current loss, smoothed over a
// few steps, not a long window's mean);
// acc: the last test accuracy evaluated;
// ETA: the longest of (steps left / recent rate) over the live workers still
// training; staleness (async only): the mean of the window's step records;
// checkpoint step N: the newest checkpoint written;
// then each worker's steps and recent rate ("done" once it has finished).
// When the launch ends, one last line says so in every ending: "done: N
// steps" (finished), "done (interrupted): step 37/100 37% ..." or "done
// (failed): ...".
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

namespace pstrain::launcher {

struct WorkerStatus {
  // kAbandoned: a joiner whose join the scheduler abandoned before its
  // boundary (its slot vacant again; metrics/scheduler.jsonl says so).
  enum class State { kLive, kDropped, kRestarting, kAbandoned };
  int rank = 0;
  State state = State::kLive;
  std::int64_t steps_done = 0;        // step records read (the last step + 1)
  std::int64_t total_steps = -1;      // from its "plan" record; -1: not known yet
  std::optional<double> steps_per_s;  // over the recent window; empty: too few records yet
  std::optional<double> loss;         // EMA of its finite step losses
  std::int64_t epoch = -1;            // of its last step record; -1: none yet
  std::int64_t epochs = -1;           // from its "plan" record; -1: not known
  std::optional<double> test_accuracy;  // its last "eval" record's
  std::optional<double> staleness;    // mean of the window's step records
  bool finished = false;              // its "end" record was read
  bool retired = false;               // and it says a membership change left it out (elastic shrink)
  // The workers sharing the training set, from its latest "plan" record that
  // says (a membership change: a drop, a rejoin, elastic); -1: no change seen.
  std::int64_t workers = -1;
  std::string workers_reason;  // why they changed, when the plan record says ("ctl", "join", "retire")
};

struct StatusSnapshot {
  double elapsed_s = 0;  // job clock
  bool async = false;
  std::vector<WorkerStatus> workers;
  std::string phase;                         // before the first step: "registering 2/2 servers 1/2 workers"
  std::optional<std::int64_t> checkpoint_step;  // the newest checkpoint written
  // Set once the launch has ended: "" finished, else how ("interrupted", "failed").
  std::optional<std::string> ending;
};

// Seconds until the last live worker is done; empty while a live worker that
// is still training has no total or no recent rate (or a rate of 0).
std::optional<double> eta_s(const StatusSnapshot& s);

// "42s", "3m05s", "1h02m".
std::string duration_text(double seconds);

// The status text without the prefix: the head (progress, rate, loss, ETA,
// staleness), then " | w<rank> ..." for each worker.
std::string status_text(const StatusSnapshot& s);

// One plain line (no '\n'): log_prefix(elapsed, "status") + status_text().
std::string render_plain(const StatusSnapshot& s);

// The line for a terminal `width` columns wide: the plain line, with workers'
// parts left off ("| +3 more") and finally the end cut ("...") until it fits
// in width - 1 columns (the last column would make some terminals wrap).
std::string render_terminal(const StatusSnapshot& s, std::size_t width);

// Steps per second of one worker over a recent window of its step records.
// Times are the worker's own ("time_s" of its records); `now` is the current
// time on that axis, so a worker that stops stepping decays to 0/s.
class StepWindow {
 public:
  explicit StepWindow(double window_s = 10.0) : window_s_(window_s) {}

  // A step record: `steps_done` = its step + 1; loss/staleness NaN if none.
  void add(double time_s, std::int64_t steps_done, double loss, double staleness);

  // (steps now - steps at the window's base) / (now - base time), the base
  // being the newest record at or before now - window (else the first one);
  // empty with fewer than two records or no time elapsed.
  std::optional<double> rate(double now) const;
  std::optional<double> mean_loss(double now) const;       // records after now - window; else the last
  std::optional<double> mean_staleness(double now) const;  // idem
  std::int64_t steps_done() const { return records_.empty() ? 0 : records_.back().steps_done; }

 private:
  struct Record {
    double time_s;
    std::int64_t steps_done;
    double loss;
    double staleness;
  };
  std::optional<double> mean_of(double now, double Record::*field) const;

  double window_s_;
  std::deque<Record> records_;  // the newest window's, and the newest one before it
};

}  // namespace pstrain::launcher
