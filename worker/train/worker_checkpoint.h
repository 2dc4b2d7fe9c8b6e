// A worker's side of checkpoints (common/checkpoint/checkpoint.h; protocol in
// docs/architecture.md, "Checkpoints and resume").
//
// Every worker writes worker-R.ckpt when it has finished step S-1 (S a
// multiple of checkpoint.interval_steps): S (the steps done; the epoch and
// the position in the shard order follow from it, as the shard order is a
// function of the seed and epoch, and the learning rate from the schedule),
// the model's dropout step counter (its only random state), its metric
// counters, the metrics file's size and clock. In allreduce mode the part of
// the leader (worker 0, or the lowest worker left once it was dropped) also
// holds the replicated model and optimizer state. Then all meet: at the
// scheduler's barrier "checkpoint S" (parameter server), in a collective
// operation (allreduce: allreduce_worker.cc, take_checkpoint); worker 0 (the
// allreduce leader) writes the manifest (checking every part's size and
// CRC-32), which makes the checkpoint complete, and prunes old ones to
// checkpoint.keep.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/checkpoint/checkpoint.h"
#include "common/config/config.h"
#include "common/base/log.h"
#include "worker/train/metrics.h"
#include "worker/train/records.h"

namespace pstrain {
class SchedulerClient;
}

namespace pstrain {

struct WorkerCheckpoint {
  std::int64_t step = 0;           // steps completed by every worker
  std::uint64_t dropout_step = 0;  // nn::Model::dropout_step()
  double time_s = 0.0;             // the metrics clock then
  std::int64_t metrics_bytes = 0;  // the metrics file's size then; -1: unknown (keep the file whole)
  TrainResult result;              // counters so far
  std::int64_t optimizer_steps = 0;  // allreduce: the local optimizer's steps (every worker)
  // Each epoch's workers so far (EpochMembers::history(); empty: all, every epoch).
  std::vector<std::int64_t> epoch_members;
  // Allreduce: the replicated model and optimizer state, in the leader's part
  // (empty otherwise); read_worker_part gives them to worker 0 whichever part holds them.
  std::vector<float> params;
  std::vector<float> optimizer_state;
};

// "worker-2.ckpt".
std::string worker_part_name(int rank);

// Writes this worker's part of the checkpoint at `state.step`; returns its directory.
std::filesystem::path write_worker_part(const RunConfig& config, int rank, const WorkerCheckpoint& state);

// The manifest writer (finish_ps_checkpoint below; in allreduce mode the
// leader), after the barrier: the manifest over every server's and worker's
// part, then pruning. Returns a log line (what was written, how long).
// `server_failed` (may be empty) is asked while servers' parts are missing:
// true means a server failed (on_server_failure = "restart") after the
// barrier; its replacement reloads an older checkpoint and never writes this
// one's part, so the checkpoint is abandoned (no manifest; resume passes over
// it) and *abandoned set, instead of waiting out timeout_ms.
// `record_members` records the membership in the manifest (both PS and
// allreduce jobs pass true)
// (common/checkpoint/checkpoint_members.h reads it back): the workers of the
// last segment of the membership history the parts hold (cut at the
// checkpoint's step, EpochMembers::history_before) that wrote a part; not
// the scheduler's live set, which already leaves out a worker retiring at
// that very step although the history still counts it. false records none.
std::string complete_checkpoint(const RunConfig& config, std::int64_t step, std::int64_t num_params, int num_servers,
                                const std::function<bool()>& server_failed = {}, bool* abandoned = nullptr,
                                bool record_members = false);

// A PS checkpoint after its barrier: asks the scheduler for the live workers
// now, and the lowest of them (worker 0 unless it was dropped) completes the
// checkpoint (complete_checkpoint, abandoning it if a server fails again
// after `server_failures_before` had been heard of) and logs the outcome.
// Every other worker returns at once. Choosing the writer from the live set,
// not a fixed rank, keeps checkpoints completing after worker 0 is dropped
// (continue) and when a restarted worker 0 rejoins exactly at a checkpoint
// step. A drop between the barrier and the writer's ask can leave one
// checkpoint without a manifest (resume passes over it); the next completes.
void finish_ps_checkpoint(SchedulerClient& scheduler, int rank, const RunConfig& config, std::int64_t step,
                          std::int64_t num_params, int num_servers, std::int64_t server_failures_before, Logger& log);

// Reads worker `rank`'s part of checkpoint `dir` after checking the
// manifest's fingerprint against the config's (ConfigError naming the
// differences) and the part's size and CRC-32 (CheckpointError). A worker
// the failure policy had dropped has no part: it starts at the checkpoint's
// step with fresh counters (metrics_bytes -1). In allreduce mode worker 0
// gets the replicated model and optimizer state from the part that holds
// them (CheckpointError when none does), to broadcast them.
WorkerCheckpoint read_worker_part(const std::filesystem::path& dir, int rank, const RunConfig& config,
                                  std::int64_t num_params);

// Whether a checkpoint is due after `steps_done` steps. Also after the last
// step when it falls on the interval (a run stopped by max_steps can then go
// on with a larger one; the servers, which do not know the run's length,
// save that step anyway).
inline bool checkpoint_due(const RunConfig& config, std::int64_t steps_done) {
  const std::int64_t every = config.checkpoint.interval_steps;
  return every > 0 && steps_done > 0 && steps_done % every == 0;
}

// A worker's start: its part of the checkpoint in `resume_dir` (none when
// empty), and its metrics file, cut back to the checkpoint and appended to
// when resuming, else new; incomplete writes are said on `log`.
struct WorkerStart {
  std::optional<WorkerCheckpoint> resume;
  std::unique_ptr<MetricsWriter> metrics;
};
WorkerStart start_worker(const std::string& resume_dir, int rank, const RunConfig& config, std::int64_t num_params,
                         Logger& log);

}  // namespace pstrain
