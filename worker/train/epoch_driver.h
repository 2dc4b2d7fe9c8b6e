// The schedule every distributed training loop follows, in one place so the
// modes take exactly the same steps: each epoch this worker's shard of the
// training set (ShardSampler from the seed: disjoint across workers, reshuffled
// per epoch), cut into batches of workload.batch_size; ceil(shard / batch)
// steps per epoch (the same on every worker), capped by workload.max_steps;
// the learning rate of each step from the schedule (linear scaling by the
// samples per update: batch x workers in sync and allreduce, batch in async
// and ssp, common/math/lr_schedule.h); progress lines from worker 0 five times an epoch (the mean loss
// and images/s since the previous line); a hook at each epoch's end. Before
// the first step it writes the metrics file's "plan" record (total_steps,
// steps_per_epoch, epochs), which the launcher's status line reads. Not
// thread-safe.
//
// The workers that share an epoch come from EpochMembers (epoch_members.h):
// with all N workers it is the fixed (rank, N) split; after a drop
// (on_worker_failure = "continue") the survivors split the whole training set
// from the next epoch, which changes the steps of that epoch and so the
// total: the driver then writes another "plan" record (with the epoch and the
// number of workers), and readers take the latest. The learning-rate schedule
// follows the plan: each step's rate is the schedule's at the same fraction
// of its epoch (LrSchedule::lr_in_epoch), so decays happen at the same
// epochs as in a run without the drop.
//
// Elastic membership: an epoch's members may change within it (segments,
// worker/train/epoch_split.h). The driver looks at the epoch's segments
// after every step (the step function may add one: a change the scheduler
// announced), re-splits the rest of the epoch, and writes a new "plan"
// record (with the step it takes effect at). A worker that is not a member
// of a later segment retires: run() returns at that segment's first step
// (retired() is then true). In an elastic job (cluster.min_workers !=
// max_workers) with schedule.linear_scaling, sync and allreduce steps take
// the rate scaled by the segment's members over cluster.workers (the global
// batch); async and ssp keep the per-push rate.
//
// Coverage: when this process leaves an epoch (just before the epoch's last
// step, so that a checkpoint after it keeps the record; a retirement; the
// last step of the run) it writes a "coverage" record (epoch, first_step,
// steps, samples, checksum: EpochCoverage, epoch_split.h) of the samples it
// trained in it, so a run's records of an epoch can be checked against the
// epoch's permutation (every sample once, plus the padding).
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "common/config/config.h"
#include "common/base/log.h"
#include "common/math/lr_schedule.h"
#include "worker/data/dataset.h"
#include "worker/data/shard_sampler.h"
#include "worker/train/epoch_members.h"
#include "worker/train/epoch_split.h"
#include "worker/train/metrics.h"

namespace pstrain {

// ceil(shard_samples / batch_size).
std::int64_t steps_per_epoch(std::int64_t shard_samples, int batch_size);

class EpochDriver {
 public:
  // Runs one step; returns its training loss (NaN when there is none, e.g. simulated compute).
  using StepFn = std::function<double(std::span<const std::int64_t> batch, std::int64_t step, int epoch, double lr)>;
  // `last` is true after the final step (the caller evaluates then itself).
  using EpochEndFn = std::function<void(std::int64_t steps_done, int epoch, bool last)>;

  // ConfigError when workload.batch_size exceeds this worker's shard (ceil(N / workers)).
  EpochDriver(const RunConfig& config, const data::Dataset& train, int rank, int num_workers);

  // The plan with every worker (before any drop).
  std::int64_t steps_per_epoch() const { return per_epoch_; }
  std::int64_t total_steps() const { return total_; }
  // The epoch the last of `steps_done` steps ran in (0 before any step): with
  // workload.max_steps a run can end before the config's last epoch. After
  // run(), from the epochs it took (their lengths may differ after a drop).
  int epoch_after(std::int64_t steps_done) const;

  // Runs every step; returns how many were taken (in all). `images` is read
  // for the progress lines (images trained so far by this worker).
  // first_step > 0 (resume from a checkpoint): starts there, at its epoch and
  // position in the epoch's order, without a second "plan" record; at an
  // epoch boundary the previous epoch's end hook runs first (the checkpoint
  // was taken before it).
  // `members` (may be null: every worker, every epoch) gives each epoch's
  // workers; it must be the same answers on every worker.
  std::int64_t run(Logger& log, MetricsWriter& metrics, const std::int64_t& images, const StepFn& step,
                   const EpochEndFn& epoch_end, std::int64_t first_step = 0, EpochMembers* members = nullptr);
  // Whether run() returned because this worker is not a member of a later segment.
  bool retired() const { return retired_; }
  // While the step function runs: the step this worker runs next, counted
  // within its epoch (the next epoch's step 0 after an epoch's last step),
  // or `end` when the run has no step after this one. A membership change's
  // answer (worker/train/membership_answer.h).
  struct NextStep {
    int epoch = 0;
    std::int64_t step = 0;
    bool end = false;
    std::int64_t global = 0;  // the same step in the job's numbering (the servers' step)
  };
  const NextStep& next_step() const { return next_; }
  // While the step function runs: this step's own place (its epoch, its step
  // within it, the job's step; `end` false). A rejoiner's checkpoint at its
  // first step cuts its membership history there (ps_worker.cc).
  const NextStep& this_step() const { return this_; }
  // The step after that one (its epoch's step 1 when the next is an epoch's
  // first), or `end`: where a worker that answers a change one step ahead
  // promises to wait (worker/train/membership_answer.h).
  const NextStep& step_after_next() const { return after_next_; }

  struct Walk;  // run()'s state (epoch_driver.cc)

 private:
  // Runs epoch `w.epoch` from step `w.step`; false when this worker retired.
  bool run_epoch(Walk& w) const;
  EpochSplit split_of(EpochMembers& who, int epoch) const;
  // The plan's steps in all, from epoch `epoch` (begun at step `start`, split as `split`) on.
  std::int64_t planned_total(std::int64_t start, int epoch, const EpochSplit& split,
                             const std::vector<EpochSegment>& segments) const;
  // Recomputes the total; writes a "plan" record (and logs it) when the
  // epoch's steps differ from the last one's or `changed` (a change from step `at`).
  void replan(Walk& w, const EpochSplit& split, std::int64_t at, bool changed) const;
  // The rate factor of a segment with `members` workers (1 unless elastic linear scaling).
  double lr_factor(int members) const;

  int batch_size_;
  int epochs_;
  int rank_;
  int num_workers_;
  bool scale_lr_by_members_;
  std::int64_t num_samples_;
  std::uint64_t seed_;
  std::int64_t max_steps_;
  data::ShardSampler sampler_;
  std::int64_t per_epoch_;
  std::int64_t total_;
  LrSchedule schedule_;
  std::vector<std::int64_t> epoch_starts_;  // first step of each epoch run() reached
  bool retired_ = false;
  mutable NextStep this_;  // this_step(): set by run_epoch before each step
  mutable NextStep next_;  // next_step(): likewise
  mutable NextStep after_next_;  // step_after_next(): likewise
};

}  // namespace pstrain
