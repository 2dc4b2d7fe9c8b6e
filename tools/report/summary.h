// A run's headline figures (summary.json and summary.md of the run
// directory, docs/run_directory.md), computed from its metrics files.
//
// Definitions:
//   final_test_accuracy  the last "eval" record's test_accuracy (worker 0)
//   wall_time_s          the slowest worker's training time ("end".time_s)
//   time_to_accuracy     per threshold, time_s of worker 0's first "eval" at
//                        or above it; empty (null) if never reached
//   global_images_per_s  images summed over workers / wall_time_s
//   compute              the lowest-ranked worker's "compute" record: backend,
//                        conv path and precision; empty (null) in older runs
//   staleness            async and ssp: the servers' histograms summed, their
//                        mean and largest staleness
//   ssp                  ssp only: the bound, the largest clock gap any
//                        server saw at an answered pull, and the mean time
//                        workers' pulls were held by the bound
//   resources            per process with a resources CSV: CPU, RSS, bytes
//                        and GPU means and peaks (tools/report/resources.h)
//   restarts             each worker restart: rank, time_s, step rejoined
//   abandoned_joins      each --join worker that failed before its boundary
//                        (the scheduler's records): rank, time_s, change, reason
//   partial              the run did not finish (interrupted or failed;
//                        pstrain-summary --partial, or launch at such an
//                        end): what ran, with partial_reason; a worker
//                        without an "end" record is "interrupted" and
//                        counted from its step records; missing metrics
//                        files are warnings, not errors
//   warnings             what was left out and why (e.g. a malformed resources CSV)
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/config/config.h"
#include "tools/report/metrics.h"
#include "tools/report/resources.h"

namespace pstrain::report {

struct WorkerSummary {
  int rank = -1;
  double time_s = 0;
  std::int64_t images = 0;
  double compute_s = 0;
  double pull_s = 0;
  double push_s = 0;
  double blocked_s = 0;
  double images_per_s = 0;
  std::int64_t skipped_steps = 0;  // workload.on_nonfinite "skip": steps whose update it dropped
  std::int64_t steps_done = 0;     // its last step record's step + 1 (steps run, counting from step 0)
  bool dropped = false;  // no "end" record: lost, and dropped under on_worker_failure "continue"
  // "done"; "restarted" (a new process took the rank back and finished: the
  // counts above add up every process of the rank); "dropped" (the job went
  // on without it); "interrupted" (a partial summary: it had not finished).
  std::string status = "done";
};

// A worker rank taken back by a new process (cluster.on_worker_failure =
// "restart"): who, when (job clock, s) and the step it rejoined at.
struct RestartSummary {
  int rank = -1;
  double time_s = 0;
  std::int64_t step = 0;             // where it rejoined (-1: it did not, retired_by_change)
  std::int64_t retired_by_change = 0;  // RejoinRecord::retired_by_change
};

struct AccuracyTime {
  std::string threshold;         // "0.80"
  std::optional<double> time_s;  // empty: never reached
};

struct StalenessSummary {
  std::optional<double> mean;        // empty when no push was counted
  std::optional<std::int64_t> max;
  std::map<std::int64_t, std::int64_t> histogram;
};

struct SspSummary {
  int staleness_bound = 0;
  std::int64_t clock_gap_max = 0;
  double blocked_s_mean = 0;  // over workers
};

// A change of the workers sharing the training set, from the workers' "plan"
// records (docs/run_directory.md): from `step` (the first of `epoch`, or
// within it), `new_workers` instead of `old_workers`. `reason`: "drop" (fewer
// from an epoch's start: a worker the job went on without), "rejoin" (more
// from an epoch's start: a rank taken back), "retire" / "join" (fewer / more
// from a step within an epoch: elastic membership), "ctl" (more within an
// epoch, requested with pstrain-ctl; the plan record's own reason, when it
// has one, decides between "join" and "ctl").
struct MembershipChangeSummary {
  std::int64_t epoch = 0;
  std::int64_t step = -1;  // -1: not known (no step record of that epoch)
  std::int64_t old_workers = 0;
  std::int64_t new_workers = 0;
  std::string reason;
};

struct RunSummary {
  std::string mode;
  int workers = 0;
  int servers = 0;
  std::string model;
  std::string dataset;
  std::optional<ComputeRecord> compute;  // what the convolutions ran on (null: no worker said)
  std::optional<double> final_test_accuracy;  // empty: no evaluation
  double wall_time_s = 0;
  std::vector<AccuracyTime> time_to_accuracy;  // 0.80, 0.85, 0.90
  double global_images_per_s = 0;
  std::vector<WorkerSummary> per_worker;
  std::optional<StalenessSummary> staleness;  // async and ssp
  std::optional<SspSummary> ssp;              // ssp only
  std::vector<int> dropped_workers;           // on_worker_failure "continue": workers the job went on without
  std::vector<RestartSummary> restarts;       // on_worker_failure "restart": each rejoin, by rank then time
  std::vector<std::int64_t> resumed_from;     // launch --resume: the checkpoint step of each resume, in order
  std::vector<MembershipChangeSummary> membership_changes;  // in order
  // Joins abandoned before their boundary (the scheduler's records): no change
  // of the workers sharing the training set, so not in membership_changes.
  std::vector<AbandonedJoinRecord> abandoned_joins;         // in order
  std::int64_t partial_updates = 0;           // sync: chunk updates made without a dropped worker
  // on_server_failure "restart": each server that rejoined, and what was lost (ServerMetrics).
  struct ServerRestart {
    int rank = 0;
    std::int64_t from_step = 0;
    std::int64_t lost_updates = 0;
    std::int64_t lost_pushes = 0;
  };
  std::vector<ServerRestart> server_restarts;
  std::int64_t skipped_steps = 0;             // on_nonfinite "skip": summed over workers
  std::vector<ResourceSummary> resources;     // empty: resource sampling off
  bool partial = false;          // the run did not finish: a summary of what ran
  std::string partial_reason;    // partial: "interrupted by signal 2 (SIGINT)", "failed: ..."
  std::vector<std::string> warnings;
};

// How to summarize a run that did not finish (pstrain-summary --partial).
struct PartialRun {
  std::string reason;  // why it ended; shown in summary.json and summary.md
};

RunSummary summarize(const RunConfig& config, const RunMetrics& metrics, const PartialRun* partial = nullptr);

// summary.json: an object with the keys above, in that order; empty
// optionals are null.
std::string summary_json(const RunSummary& summary);
// summary.md: a headline table, time-to-accuracy, staleness (async), a
// per-worker table, resource use and warnings (when there are any); units
// in the column headers.
std::string summary_markdown(const RunSummary& summary, const std::string& run_dir);

// Reads <run_dir>/config.toml and the metrics, writes summary.json and
// summary.md there, and returns the summary. Throws DataError/ConfigError
// (resource CSVs that cannot be used only add warnings). `partial`: a run
// that did not finish (see "partial" above); a missing or unreadable
// metrics file is then a warning.
RunSummary write_run_summary(const std::filesystem::path& run_dir, const PartialRun* partial = nullptr);

// A partial summary's reason as an earlier one recorded it (summary.json's
// "partial_reason"), or "" when there is none.
std::string recorded_partial_reason(const std::filesystem::path& run_dir);

}  // namespace pstrain::report
