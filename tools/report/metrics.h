// Readers for a run directory's metrics files (docs/run_directory.md):
// metrics/worker-<w>.jsonl (one JSON object per line: "compute", "plan", "step", "eval", "rejoin",
// "resume", "end")
// and metrics/server-<s>.json (update counts and the staleness histogram).
//
// Every documented field must be present with its type; a JSON null stands
// for a non-finite number (NaN). Fields not documented are ignored, so
// writers may add some. Errors are DataError naming "FILE:LINE" and the key.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tools/report/scheduler_records.h"

namespace pstrain::report {

// What the worker's EpochDriver will run (written before its first step).
struct PlanRecord {
  std::int64_t total_steps = 0;
  std::int64_t steps_per_epoch = 0;
  std::int64_t epochs = 0;
};

// A "plan" record after the first that says from which epoch (and, for a
// change within an epoch, from which step) `workers` workers share the
// training set: a membership change as this worker saw it.
struct PlanChange {
  std::int64_t epoch = 0;
  std::int64_t step = -1;  // -1: from the epoch's start (its first step record says which)
  std::int64_t workers = 0;
  std::string reason{};    // the record's "reason" ("ctl", "join", "retire"), empty when it has none
};

struct StepRecord {
  double time_s = 0;  // since the worker started training
  std::int64_t step = 0;
  std::int64_t epoch = 0;
  std::int64_t batch = 0;
  double loss = 0;
  double accuracy = 0;
  double images_per_s = 0;
  double compute_ms = 0;
  double pull_ms = 0;
  double push_ms = 0;
  double lr = 0;
  double staleness = 0;
  bool simulated = false;
  bool skipped = false;  // on_nonfinite "skip": this step's update dropped (absent in older files: false)
};

struct EvalRecord {
  double time_s = 0;
  std::int64_t step = 0;
  std::int64_t epoch = 0;
  double test_loss = 0;
  double test_accuracy = 0;  // fraction in [0, 1]
};

struct EndRecord {
  double time_s = 0;  // training wall time of the worker
  std::int64_t steps = 0;
  std::int64_t images = 0;
  double compute_s = 0;
  double pull_s = 0;
  double push_s = 0;
  double blocked_s = 0;  // pulls held at the servers by the consistency policy
  std::int64_t skipped_steps = 0;  // on_nonfinite "skip" (absent in older files: 0)
  bool retired = false;  // a membership change left this worker out (absent in older files: false)
};

// A new process took this worker's rank back (cluster.on_worker_failure =
// "restart") and continued from `step`; its records follow in the same file.
struct RejoinRecord {
  double time_s = 0;  // on the rank's axis, as its predecessor's records
  std::int64_t step = 0;
  std::size_t steps_before = 0;  // step records earlier in the file: its predecessors' steps
  // Non-zero: the new process was told to leave at once, its rank retired while it was down by this
  // membership change (-1: by a request for fewer workers); "step" is then -1 (absent in older files: 0).
  std::int64_t retired_by_change = 0;
};

// The run was resumed from the checkpoint of `step` (launch --resume): this
// worker's records before it are those of the steps the checkpoint holds.
struct ResumeRecord {
  double time_s = 0;
  std::int64_t step = 0;
};

// What this worker's process trained of an epoch (worker/train/epoch_driver.h,
// "coverage"): its samples and their additive checksum (16 hex digits,
// worker/train/epoch_split.h), from first_step for `steps` steps. Absent in
// files of older runs.
struct CoverageRecord {
  std::int64_t epoch = 0;
  std::int64_t first_step = 0;
  std::int64_t steps = 0;
  std::int64_t samples = 0;
  std::string checksum;
};

// What the worker computed on (written at its start; again by a resumed or
// rejoined process): the backend, its convolution path and precision.
struct ComputeRecord {
  std::string backend;      // "cuda:0 (NVIDIA H200, sm_90, ...)", "cpu (oneDNN, 1 thread)"
  std::string conv_path;    // "cudnn", "cuda-im2col" or "onednn"
  std::string conv_detail;  // "convolutions by cuDNN 9.14.0 (built with 9.19.0)", "oneDNN 3.0.0"
  std::string precision;    // "fp32" or "tf32"
};

struct WorkerMetrics {
  int rank = -1;
  std::vector<CoverageRecord> coverage;
  std::int64_t joined_at = -1;  // a "join" record's step: this process joined the running job there (--join)
  std::optional<ComputeRecord> compute;  // the last one in the file; absent in files of older runs
  std::vector<RejoinRecord> rejoins;
  std::vector<ResumeRecord> resumes;
  std::optional<PlanRecord> plan;  // absent in files of older runs
  std::vector<PlanChange> plan_changes;  // the later "plan" records with epoch and workers, in order
  std::vector<StepRecord> steps;
  std::vector<EvalRecord> evals;
  std::optional<EndRecord> end;  // absent while the worker runs or if it crashed
};

struct ServerMetrics {
  int rank = -1;
  std::int64_t updates = 0;
  std::int64_t pushes_accepted = 0;
  std::int64_t pushes_rejected = 0;
  std::int64_t partial_updates = 0;  // sync: updates with fewer than all workers' gradients
  std::int64_t clock_gap_max = 0;    // ssp: largest lead over the slowest worker at an answered pull
  std::map<std::int64_t, std::int64_t> staleness_histogram;  // staleness -> count
  // on_server_failure "restart": a server that rejoined says from which
  // checkpoint step (-1: it never failed) and what its predecessor's failure lost.
  std::int64_t rejoined_from_step = -1;
  std::int64_t lost_updates = 0;   // chunk updates
  std::int64_t lost_pushes = 0;    // sync: contributions to the step in progress
  std::int64_t duplicate_pushes = 0;  // resends acknowledged, not applied again
};

struct RunMetrics {
  std::vector<WorkerMetrics> workers;  // index = rank
  std::vector<ServerMetrics> servers;  // index = rank
  std::vector<AbandonedJoinRecord> abandoned_joins;  // the scheduler's records (metrics/scheduler.jsonl), in order
};

// Reads one worker's file. At most one "end" record, and it must be last.
// `may_be_cut`: the worker may have been killed while writing its last
// line; an unterminated last line that does not parse is left out.
WorkerMetrics read_worker_metrics(const std::filesystem::path& file, int rank, bool may_be_cut = false);
// Reads one server's file; its "rank" must equal `rank`.
ServerMetrics read_server_metrics(const std::filesystem::path& file, int rank);
// Reads metrics/worker-0..W-1.jsonl and metrics/server-0..S-1.json; a
// missing file is a DataError naming it. Every worker must have its "end",
// unless `workers_may_be_lost` (cluster.on_worker_failure = "continue").
// `partial` (a run that did not finish): no "end" is needed, a worker's
// last line may be cut, and a file that is missing or unreadable is left
// out with one line in *partial saying which and why.
RunMetrics read_run_metrics(const std::filesystem::path& run_dir, int num_workers, int num_servers,
                            bool workers_may_be_lost = false, std::vector<std::string>* partial = nullptr);

std::filesystem::path worker_metrics_path(const std::filesystem::path& run_dir, int rank);
std::filesystem::path server_metrics_path(const std::filesystem::path& run_dir, int rank);

}  // namespace pstrain::report
