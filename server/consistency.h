// The consistency policy of a server's chunks: when a push is applied, when
// a pull may be answered, how stale an applied push is, and how a chunk
// catches up after its server rejoined. One object per mode, chosen once
// when the store is built; ShardStore owns the weights, optimizer and
// versions and asks the policy whatever differs by mode, so neither it nor
// the server switches on the mode.
//
// sync: a chunk at version v takes exactly one push per live worker for step
//   v. Gradients are reduced in worker-rank order whatever order they arrive
//   in (an early arrival waits in a buffer until the ranks before it are in),
//   so two runs of one config give identical bits; when every live worker has
//   pushed, one update with the mean of the contributions is applied
//   (version v+1). Mostly the last contribution is not added into the sum:
//   the update's pass adds it, one pass over the chunk fewer, the same bits.
//   That is the last push to arrive when it is the last contribution in rank
//   order or one of two (update_on_arrival), or the last early arrival when
//   it is the last in rank order (checked when it came). A step that a
//   later skip push or a drop completes has all of its sum added already.
//   A pull for step t is answered once the version is >= t.
// async: every push is applied on arrival; a pull is answered at once.
// ssp (stale synchronous parallel, Ho et al. 2013, bound s): pushes as in
//   async; a pull by a worker about to compute step t is answered only when
//   every live worker has pushed step t-s-1 of this chunk (its clock, the
//   number of steps it pushed, is >= t-s), so no worker computes on weights
//   missing more than s steps of any other worker's updates. s = 0 is
//   lock-step with per-push updates.
// In every mode a worker's steps must increase per chunk (a repeat is a
// duplicate, a lower step is stale). A worker dropped by the failure policy
// is no longer waited for; its later pushes are refused.
// A skip push (workload.on_nonfinite = "skip": the worker saw a non-finite
// loss or gradient) is that worker's push for the step with no gradient:
// sync counts it as an arrival without a contribution (the update is the
// mean over the workers that contributed; if none did, the update is empty:
// no optimizer step, but the version still advances so pulls for the next
// step are answered); async and ssp record the step (the worker's clock)
// and apply nothing.
// Not thread-safe: owned by the ShardStore's thread.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/config/config.h"
#include "common/math/parallel_ranges.h"
#include "common/math/update_rules.h"

namespace pstrain {

struct ConsistencyOptions {
  Mode mode = Mode::kSync;
  int staleness_bound = 0;  // ssp only
};

// A push for the policy: the gradient as it arrived (float32 or bfloat16,
// not yet checked for NaN/Inf: the pass that takes it in checks it).
struct PushRequest {
  std::int64_t key = 0;  // for messages
  int worker = 0;
  std::int64_t step = 0;
  update::GradSource grad;  // nothing for a skip; mean_of 1
  std::size_t num_elems = 0;
  double lr = 0.0;
  bool skip = false;             // a skip push: contributes nothing
};

// What to apply now: the gradient (sync: the sum of `contributors` workers'
// gradients with grad.mean_of = contributors, the mean taken in the update's
// pass) and the learning rate. contributors = 0 (sync, every worker skipped):
// an empty update, no optimizer step, the version advances.
struct Update {
  update::GradSource grad;
  std::size_t num_elems = 0;
  double lr = 0.0;
  int contributors = 1;
  int skips = 0;  // sync: workers that arrived with a skip push
  // The push's own gradient is in it, not yet checked for NaN/Inf
  // (update_on_arrival): only the pass that checks it may apply it.
  bool unchecked = false;
  // sync: fewer workers arrived than the job has (one was dropped); counted
  // as a partial update when it is applied.
  bool partial = false;
  // sync: the update is the whole step's, of every contributor's gradient
  // (step_contributors): one whose result would be non-finite refuses the
  // step (it completes with the weights as they were), not the push that
  // completed it. Otherwise (async, ssp) it is the push's own: the push is refused.
  bool whole_step = false;
};

// What a rejoined server's chunk learns from a worker's first request
// (ConsistencyPolicy::catch_up, ShardStore::catch_up).
struct CatchUp {
  std::int64_t version = 0;       // the chunk's version now (sync: jumped to the workers' step)
  std::int64_t lost_updates = 0;  // updates the failed server applied past the checkpoint
  bool lost_push = false;         // sync: the worker's push of the step went with the failed server
  std::optional<Update> update;   // sync: that loss completed the step: to apply now
};

// Rejects `push`, whose gradient has `bad` NaN or Inf values (kRejected,
// naming the first, blaming the pusher: RequestError::blamed): "...: gradient
// has 2 non-finite values (first at element 7); not applied".
[[noreturn]] void reject_non_finite(const PushRequest& push, std::int64_t bad);

class ConsistencyPolicy {
 public:
  virtual ~ConsistencyPolicy() = default;

  // Checks `push` against chunk `chunk` (position in the store) at `version`
  // and returns the update to apply now, or nothing (sync: others to come).
  // Throws RequestError (kRejected) for a duplicate, stale, early or dropped
  // worker's push, and (sync, when the gradient goes into the rank-ordered
  // sum) for a gradient with a NaN or Inf, found in the pass that adds or
  // copies it in (nothing recorded, the sum as before). A gradient applied as
  // it arrives (update_on_arrival) is returned unchecked: the caller must
  // have staged that update and checked the gradient before this call
  // (ShardStore does; such an update is marked Update::unchecked). The
  // returned gradient stays valid until the next call.
  virtual std::optional<Update> on_push(std::size_t chunk, std::int64_t version, const PushRequest& push) = 0;
  // The update that a (non-skip) push to `chunk` would complete at once, so
  // that the store applies it in the same pass that checks the gradient,
  // before on_push() records the push (a NaN or Inf then changes nothing):
  // async, ssp: always, the push's gradient; sync: when it completes its
  // step (every other live worker is in) and adding it last gives the bits of
  // the rank-ordered sum: it is the last contribution in rank order, or one of
  // two (x + y is y + x). Then the push's gradient, with the sum of the others
  // as GradSource::partial and mean_of the number of contributors, so the
  // sum's last add is the update's pass (one contributor: its gradient
  // alone). Nothing otherwise. on_push() for the same push, when it is
  // accepted, then returns the same update.
  // `version` is the chunk's: a sync push for another step is never one
  // (on_push rejects it with its own reason, before any update pass).
  virtual std::optional<Update> update_on_arrival(std::size_t chunk, std::int64_t version,
                                                  const PushRequest& push) const = 0;
  // Whether a pull by `worker` for step `step` may be answered now.
  virtual bool pull_ready(std::size_t chunk, std::int64_t version, int worker, std::int64_t step) const = 0;
  // Stops waiting for `worker` (failure policy "continue"); returns, per
  // chunk, an update that the drop completes (sync: every other live worker
  // had already pushed), else nothing.
  virtual std::vector<std::optional<Update>> drop_worker(int worker) = 0;
  // Takes `worker` back after a drop (failure policy "restart": a new
  // process has its rank). Per chunk, its clock starts at the step the job is
  // at there, never below its own (a step it pushed before it was dropped
  // stays counted once): sync, the chunk's version (the step not yet
  // applied: that step and every later one wait for it, none before), or the
  // step after it when some worker has already pushed that one;
  // async and ssp, the slowest live worker's clock (so the ssp bound and the
  // slowest clock are unchanged). `versions` holds each chunk's version.
  // Returns each chunk's start step (the step it must push next there).
  // Throws Error for a rank out of range or a worker that is live.
  std::vector<std::int64_t> rejoin_worker(int worker, std::span<const std::int64_t> versions);
  // Elastic membership (docs/architecture.md, "Elastic membership"): a
  // vacant slot is a rank that is not in the job (a slot past
  // cluster.workers before anyone joined it, or a retired worker's): not
  // live, not waited for, not counted as missing from a sync update, and
  // its pushes are refused. vacate() makes `worker`'s slot vacant (the
  // server's start, a retirement; Error for a rank out of range).
  void vacate(int worker);
  bool vacant(int worker) const { return vacant_.at(static_cast<std::size_t>(worker)); }
  // A worker joins vacant slot `worker` from step `start`, the step the
  // scheduler announced: its clock starts there on every chunk (never below
  // its own), so no step before it waits for it (sync: a step is collected
  // without it while the step is below its start) and every step from it on
  // does (sync), or its clock counts from there (async, ssp). `versions`
  // holds each chunk's version. Error for a slot that is not vacant, or a
  // start that a chunk has passed (below rejoin_worker's step for it).
  void join_worker(int worker, std::int64_t start, std::span<const std::int64_t> versions);
  // Ssp: how far a pull's step led the slowest live worker's clock when it
  // was answered (0 in the other modes).
  virtual std::int64_t clock_gap(std::size_t chunk, std::int64_t step) const = 0;
  // The staleness of a push applied at `version` by a worker that last
  // pulled `pulled` (async, ssp: version - pulled); nothing in sync, where
  // every push is of the version it pulled.
  virtual std::optional<std::int64_t> staleness(std::int64_t version, std::int64_t pulled) const = 0;
  // The workers whose gradients are in the last whole-step update of `chunk`
  // (Update::whole_step, sync: the step's contributors, skips not included),
  // ascending; for the report of a refused step. Empty in async and ssp,
  // where an update is one push's.
  virtual std::vector<int> step_contributors(std::size_t /*chunk*/) const { return {}; }

  // Catching up after a rejoin (ShardStore::begin_catch_up, catch_up): every
  // chunk is marked, then each worker's first request to a chunk says how
  // far the failed server had got (`pull`: a pull for `step`, else a push of
  // it), and catch_up() moves the clocks there: sync, the version jumps to
  // the step every worker has pushed (clocks raised, the step being
  // collected forgotten) and a pull for the next step from a worker without
  // a push of the current one makes its contribution lost (a skip); the
  // chunk leaves catch-up at its first update. Async and ssp: the worker's
  // clock jumps to the request's step; the chunk leaves catch-up once every
  // worker has been heard from. Call only while catching_up(chunk), for a
  // live worker in range.
  virtual void begin_catch_up();
  bool catching_up(std::size_t chunk) const { return !catching_.empty() && catching_[chunk]; }
  bool any_catching_up() const { return num_catching_ > 0; }
  virtual CatchUp catch_up(std::size_t chunk, std::int64_t version, std::int64_t key, int worker, std::int64_t step,
                           bool pull) = 0;

  bool live(int worker) const { return live_.at(static_cast<std::size_t>(worker)); }
  // Checkpoints: the slowest live worker's clock of a chunk (sync: its
  // version), each worker's clock, and setting them back on resume (only at
  // a cut: no push of a later step may be buffered).
  std::int64_t slowest_clock(std::size_t chunk) const { return min_live_clock(chunk); }
  std::int64_t worker_clock(std::size_t chunk, int worker) const { return clock(chunk, worker); }
  void restore_clock(std::size_t chunk, int worker, std::int64_t clock_value) {
    last_step_.at(chunk).at(static_cast<std::size_t>(worker)) = clock_value - 1;
  }
  int num_live() const { return num_live_; }
  int num_vacant() const { return num_vacant_; }

 protected:
  // Catching up: raises `worker`'s clock of a chunk to `clock_value` (no-op
  // when it is already there).
  void raise_clock(std::size_t chunk, int worker, std::int64_t clock_value) {
    std::int64_t& last = last_step_.at(chunk).at(static_cast<std::size_t>(worker));
    last = std::max(last, clock_value - 1);
  }
  ConsistencyPolicy(std::size_t num_chunks, int num_workers);
  // Common checks: the worker is in range and live, its step is above its
  // last for the chunk (else a duplicate or stale push). Does not record it.
  void check_step(std::size_t chunk, const PushRequest& push) const;
  // The first of those: the worker is in range and live (a dropped worker's
  // push is refused as such, before any check of its step or the version).
  void check_worker(const PushRequest& push) const;
  void record_step(std::size_t chunk, const PushRequest& push) {
    last_step_[chunk][static_cast<std::size_t>(push.worker)] = push.step;
  }
  void mark_dropped(int worker);
  // The step the job is at on `chunk` for a rejoining worker (before it is
  // live again; see rejoin_worker), without its own clock.
  virtual std::int64_t rejoin_floor(std::size_t chunk, std::int64_t version) const = 0;
  // After a rejoin: `worker` starts chunk `chunk` at `start` (the chunk is at `version`).
  virtual void on_rejoined(std::size_t /*chunk*/, int /*worker*/, std::int64_t /*start*/, std::int64_t /*version*/) {}
  // Steps each worker pushed per chunk, as a clock (last step + 1; 0 = none).
  std::int64_t clock(std::size_t chunk, int worker) const {
    return last_step_[chunk][static_cast<std::size_t>(worker)] + 1;
  }
  std::int64_t min_live_clock(std::size_t chunk) const;
  std::size_t num_chunks() const { return last_step_.size(); }
  void end_catch_up(std::size_t chunk);

  int num_workers_;

 private:
  std::vector<std::vector<std::int64_t>> last_step_;  // [chunk][worker], -1 = none
  std::vector<bool> live_;
  std::vector<bool> vacant_;  // per worker: a slot not in the job (vacate, join_worker)
  int num_live_;
  int num_vacant_ = 0;
  std::vector<bool> catching_;  // per chunk, after begin_catch_up()
  std::size_t num_catching_ = 0;
};

// Throws ConfigError for allreduce (no servers) or a negative bound.
// `ranges` (the server's apply threads, server/parallel_apply.h; null: this
// thread) splits the sync sum's copy and add passes: the same bits.
std::unique_ptr<ConsistencyPolicy> make_consistency_policy(const ConsistencyOptions& options,
                                                           const std::vector<std::int64_t>& chunk_elems,
                                                           int num_workers, RangeRunner* ranges = nullptr);

// "push of chunk 3 from worker 1 at step 7" (for messages).
std::string describe_push(std::int64_t key, int worker, std::int64_t step);

}  // namespace pstrain
