// A server's chunks: weights, optimizer state and versions, with the
// consistency policy (server/consistency.h: sync, async, ssp) deciding when a
// push is applied and when a pull may be answered.
// Pure logic, no sockets: the server's event loop feeds it decoded requests.
//
// Every push is checked (shape; its learning rate: finite, >= 0 and at most
// the schedule's highest, StoreOptions::max_lr; finite values: a non-finite
// gradient is rejected and nothing is applied); the finite check is fused
// into the pass that applies or sums the gradient (see push()), and so is
// the check of what the update makes: an update whose new weights or
// optimizer state would hold a NaN or Inf is not committed (async, ssp: the
// push is refused, naming its worker; sync: the step is refused, naming the
// step's contributors, and completes with the weights as they were). A push
// refused for its own values is counted against its worker
// (StoreStats::refused_by_worker) and reported (take_refusals()).
// Staleness of an applied push = the chunk's version at apply - the version
// this worker last pulled. With optimizer.staleness_rule = "inverse" (async,
// ssp) a push of staleness t >= 1 is applied with lr / t (Zhang et al. 2016).
// Weights are held in shared buffers: a pull reply may send them zero-copy
// while the store goes on updating: an update writes a second buffer and
// swaps it in, so a snapshot never changes under a reply. Where no reply
// holds the weights any more (the usual case once the worker has read its
// pull: with shm, the server lets go when the worker hands the reply's slot
// back), the update is made in place instead (Optimizer::update_in_place:
// where a bound shows it cannot make a NaN or Inf), the same bits with
// fewer bytes through memory.
// Not thread-safe: owned by the server's event-loop thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/config/config.h"
#include "common/base/errors.h"
#include "common/math/optimizer.h"
#include "common/wire/protocol.h"
#include "common/math/shard_map.h"
#include "common/observe/trace.h"
#include "common/transport/transport.h"
#include "server/consistency.h"
#include "server/request_error.h"

namespace pstrain {

struct PushOutcome {
  // The chunk's version advanced with this push: an update applied (async:
  // always; sync: the last arrival), or (sync) a step completed without one
  // (every worker skipped, or its update was refused for a non-finite result).
  bool applied = false;
  std::int64_t version = 0;     // chunk version after the push
  std::int64_t staleness = 0;   // async and ssp
  // The chunk's slowest live clock moved (sync: the step completed): a step
  // boundary, where the server takes its checkpoint copies.
  bool clock_advanced = false;
};

// A chunk's weights: floats in memory from StoreOptions::allocate (the
// server's transport: with shm, a block of an arena the co-located workers
// map read-only, so a pull reply is read in place), alive while `owner` is.
struct WeightBuffer {
  std::span<float> values;
  std::shared_ptr<void> owner;
};

struct WeightsSnapshot {
  std::shared_ptr<const WeightBuffer> weights;  // held by the reply being sent: never written while held
  std::int64_t version = 0;
  std::vector<float> values() const { return {weights->values.begin(), weights->values.end()}; }
};

struct StoreStats {
  std::int64_t pushes_accepted = 0;
  std::int64_t pushes_rejected = 0;
  std::int64_t updates_applied = 0;                          // chunk updates
  std::int64_t in_place_updates = 0;                         // of them, made in place (not checkpointed)
  std::int64_t partial_updates = 0;                          // sync: with fewer than all workers (one dropped)
  std::int64_t skip_pushes = 0;                              // accepted skip pushes (counted in pushes_accepted)
  std::int64_t empty_updates = 0;                            // sync: every worker skipped; version advanced only
  std::int64_t clock_gap_max = 0;                            // ssp: largest pull step - slowest clock answered
  // Idempotence: pushes of a (worker, step, chunk) already accepted, acknowledged and not applied again.
  std::int64_t duplicate_pushes = 0;
  // A server that rejoined after a failure (catch_up): the checkpoint step it
  // restarted from (-1: never rejoined), the chunk updates the failed server
  // had applied past it (lost: the workers' requests show how far it got),
  // per chunk, and (sync) workers' contributions to the step in progress
  // that went with it.
  std::int64_t rejoined_from_step = -1;
  std::int64_t lost_updates = 0;
  std::int64_t lost_pushes = 0;
  std::map<std::int64_t, std::int64_t> lost_updates_by_chunk;
  std::map<std::int64_t, std::int64_t> staleness_histogram;  // async, ssp: staleness -> pushes
  // Refused for their values (a learning rate not finite, negative or above
  // the schedule's highest; a NaN or Inf in the gradient or in the update it
  // would make): per worker, its pushes so refused plus the sync steps it
  // contributed to that were refused for a non-finite update (refused_steps).
  std::map<int, std::int64_t> refused_by_worker;
  std::int64_t refused_steps = 0;  // sync: steps completed without their update (non-finite result)
};

// One chunk's state in a checkpoint (server/checkpointing.h).
struct ChunkCheckpoint {
  std::int64_t key = 0;
  std::int64_t version = 0;
  std::vector<float> weights;
  std::vector<float> optimizer_state;
  std::int64_t optimizer_steps = 0;
  std::vector<std::int64_t> clocks;  // per worker: steps pushed
};

struct StoreOptions {
  ConsistencyOptions consistency;
  OptimizerConfig optimizer;
  // The highest learning rate a push may carry (the schedule's,
  // schedule_max_lr: every server sets it, ServerOptions::max_lr), allowed
  // a relative tolerance of kLrTolerance; 0 = no bound (a store built by
  // hand in a test or bench).
  double max_lr = 0.0;
  // Zeroed memory for `count` weights (Transport::allocate_send_floats); null: ordinary memory.
  std::function<SendFloats(std::size_t count)> allocate;
  // Splits each update's pass and the sync sum's passes over the server's
  // apply threads (server/parallel_apply.h; must outlive the store); null:
  // the caller's thread. The same bits either way.
  RangeRunner* ranges = nullptr;
  // Updates in place where no reply holds the weights; false: always into a
  // spare (tests, bench_apply --hold). The same bits either way.
  bool in_place = true;
};

class ShardStore {
 public:
  ShardStore(const ShardMap& map, int server_rank, int num_workers, const StoreOptions& options);

  bool owns(std::int64_t key) const;
  std::int64_t num_elems(std::int64_t key) const;  // throws RequestError if not owned
  bool all_initialized() const { return num_initialized_ == chunks_.size(); }

  // The initial weights of a chunk; a second init of the same chunk is rejected.
  void init(std::int64_t key, std::span<const float> weights);
  // The gradient in float32, or in bfloat16 as it came on the wire (widened
  // in the update's pass). One pass over it: checked for NaN/Inf while it is
  // applied (async, ssp, and sync when it completes the step: the policy's
  // update_on_arrival, added to the others' sum in that pass; into a spare
  // weight buffer, swapped in only when it is clean) or else copied or
  // added into the sync sum (into a second sum buffer); a rejected push
  // changes nothing. The update's pass also checks what it makes (weights,
  // optimizer state): non-finite, the push is refused (async, ssp) or the
  // step completes without its update (sync; applied is then true, the
  // version advanced, the weights as they were). RequestError for a refused
  // push; one refused for its own values names its worker (blamed()).
  PushOutcome push(int worker, std::int64_t key, std::int64_t step, std::span<const float> grad, double lr);
  PushOutcome push(int worker, std::int64_t key, std::int64_t step, std::span<const std::uint16_t> grad, double lr);
  // A push as it came on the wire (msg.header: key, step, lr, dtype): a
  // bfloat16 payload goes straight into the update's pass; `scratch` is used
  // only for a payload ZeroMQ handed out unaligned. `worker` is the sender
  // the server has checked.
  PushOutcome push(int worker, const Message& msg, std::vector<float>& scratch);
  // A skip push: `worker` contributes nothing to `step` of this chunk
  // (server/consistency.h). Checked like a push (worker, step order).
  // applied = the chunk's version advanced (sync: the step completed).
  PushOutcome skip(int worker, std::int64_t key, std::int64_t step);
  // Whether a pull by `worker` about to compute step `step` can be answered
  // now: the chunk is initialized and the policy allows it (sync: version >=
  // step; ssp: within the staleness bound; async: always).
  bool ready(std::int64_t key, int worker, std::int64_t step) const;
  // The current weights; records the version `worker` pulled (for staleness)
  // and, in ssp, the clock gap of a pull for `step`.
  WeightsSnapshot snapshot(int worker, std::int64_t key, std::int64_t step = 0);
  std::int64_t version(std::int64_t key) const;
  // The failure policy dropped `worker`: it is no longer waited for and its
  // later pushes are refused. Returns the keys whose version advanced
  // (sync: the others had all pushed), so their parked pulls can be answered.
  std::vector<std::int64_t> drop_worker(int worker);
  // A new process took back dropped `worker`'s rank (on_worker_failure
  // "restart"): the policy re-admits it (ConsistencyPolicy::rejoin_worker);
  // returns, per chunk in keys() order, the step it must push next.
  std::vector<std::int64_t> rejoin_worker(int worker);
  // Elastic membership: slot `worker` is vacant (ConsistencyPolicy::vacate),
  // and a worker joins it from step `start` (ConsistencyPolicy::join_worker).
  void vacate(int worker);
  void join_worker(int worker, std::int64_t start);
  // The step `worker` must push next for chunk `key` (its clock there).
  std::int64_t next_step(int worker, std::int64_t key) const;

  // Checkpoints: the slowest live worker's clock of a chunk (every live
  // worker has pushed the steps below it; sync: the version), a copy of the
  // chunk's state, and its restore on resume (the chunk counts as
  // initialized; RequestError/ConfigError when the sizes do not fit).
  std::int64_t slowest_clock(std::int64_t key) const;
  ChunkCheckpoint save_chunk(std::int64_t key) const;
  void restore_chunk(const ChunkCheckpoint& saved);
  void restore_stats(const StoreStats& stats) { stats_ = stats; }

  // Catching up after a rejoin. The store was restored from checkpoint step
  // C, the workers are at some step S > C. begin_catch_up() marks every
  // chunk; then each worker's first request to a chunk says how far the
  // failed server had got, and the chunk jumps there instead of waiting for
  // steps that will not come (sync: the version, and a contribution that went
  // with the failed server; async, ssp: the worker's clock). The rule per
  // mode is the consistency policy's (ConsistencyPolicy::catch_up); the
  // store moves the version and counts what was lost (lost_updates,
  // lost_pushes). The server calls catch_up() as a step of its own before it
  // applies a push, skip or pull (server/server.cc), only while
  // catching_up(). Returns whether the chunk's version or a clock moved
  // (parked pulls may be answerable, a checkpoint's step reached).
  void begin_catch_up(std::int64_t restored_step);
  bool catch_up(int worker, std::int64_t key, std::int64_t step, bool pull);
  bool catching_up() const { return policy_->any_catching_up(); }
  std::vector<std::int64_t> keys() const;

  const StoreStats& stats() const { return stats_; }
  // What was refused for its values since the last call, for the server's
  // log: (worker blamed, why); a refused sync step gives one entry, under
  // its lowest contributor, its text naming them all. At most kMaxRefusalNotes are kept between calls (the rest
  // are only counted, in stats()).
  struct Refusal {
    int worker = -1;
    std::string why;
  };
  std::vector<Refusal> take_refusals() { return std::exchange(refusals_, {}); }
  // Level "all": spans "sum" (sync, a push that does not complete the step;
  // the gradient's finite check is in it) and "update" (the finite check too
  // when the push is applied on arrival, sync's last add included) inside
  // the server's request span; null = none.
  void set_trace(TraceRecorder* trace) { trace_ = trace; }

 private:
  struct ChunkState {
    std::int64_t key = 0;
    std::int64_t num_elems = 0;
    std::int64_t offset = 0;  // in the workers' flat buffer (where new_weights places the weights in a page)
    bool initialized = false;
    std::int64_t version = 0;
    std::shared_ptr<WeightBuffer> weights;
    // Earlier weights, reused for the next update (written there, then
    // swapped in) once no pull reply holds them. ZeroMQ lets go of a
    // zero-copy reply only when its connection sends the next message, so
    // the last one is often still held: a few are kept.
    std::vector<std::shared_ptr<WeightBuffer>> spares;
    std::size_t staged = 0;  // the spare stage() wrote
    bool in_place = false;   // stage() updated `weights` in place (no reply held them): nothing to swap
    double weight_bound = Optimizer::kUnknownBound;  // >= every |weight| (update_in_place's)
    std::unique_ptr<Optimizer> optimizer;
    std::vector<std::int64_t> pulled_version;  // per worker: version last pulled
  };
  // Idempotence: a push of a step below the worker's clock of the chunk was
  // accepted before (worker steps increase): acknowledged, not applied.
  std::optional<PushOutcome> duplicate(ChunkState& c, std::size_t at, int worker, std::int64_t step);
  void count_lost(ChunkState& c, std::int64_t updates);

  std::size_t position(std::int64_t key, const char* op) const;  // throws RequestError if not owned
  PushOutcome push_gradient(int worker, std::int64_t key, std::int64_t step, update::GradSource grad,
                            std::size_t num_elems, double lr);
  // The update of `c` into its spare weights (and the optimizer's staged
  // state), checking the gradient and the result; commit() swaps it in.
  update::UpdateCheck stage(ChunkState& c, update::GradSource grad, std::size_t num_elems, double lr);
  void commit(ChunkState& c, const Update& update);
  // stage + commit (sync's mean, drop, catch-up); a non-finite result refuses the step.
  void apply(ChunkState& c, const Update& update);
  // Async, ssp: the push's update would be non-finite: RequestError blaming its worker.
  [[noreturn]] void refuse_push(const ChunkState& c, const PushRequest& push, const update::UpdateCheck& check,
                                double lr);
  // Sync: the step's update would be non-finite: the version advances, the
  // weights and state stay, the step's contributors are counted and reported.
  void refuse_step(ChunkState& c, const Update& update, const update::UpdateCheck& check);
  // "first at element 3: weight 0.5 -> -inf (gradient 1e+30, lr 0.05)"
  std::string describe_result(const ChunkState& c, const update::GradSource& grad,
                              const update::UpdateCheck& check, double lr) const;
  void note_refusal(int worker, const std::string& why);
  // Zeroed, from options_.allocate; a chunk of kPlacedWeightsBytes or more
  // starts at its flat `offset` modulo the page when the block is page aligned.
  std::shared_ptr<WeightBuffer> new_weights(std::int64_t num_elems, std::int64_t offset) const;

  int server_rank_;
  int num_workers_;
  StoreOptions options_;
  bool inverse_staleness_ = false;
  std::vector<ChunkState> chunks_;       // owned chunks, by increasing key
  std::unique_ptr<ConsistencyPolicy> policy_;
  std::map<std::int64_t, std::size_t> index_;  // key -> position in chunks_
  std::size_t num_initialized_ = 0;
  StoreStats stats_;
  std::vector<Refusal> refusals_;
  TraceRecorder* trace_ = nullptr;
};

// A push's learning rate may exceed StoreOptions::max_lr by this fraction of
// it (the worker computes the same double; this allows for rounding only).
inline constexpr double kLrTolerance = 1e-6;
// Chunks of at least this many bytes are placed in their weight buffers at
// their offset in the workers' flat buffer modulo the page (kWeightsPageBytes):
// a co-located worker maps their whole pages instead of copying them.
inline constexpr std::size_t kWeightsPageBytes = 4096;
inline constexpr std::size_t kPlacedWeightsBytes = 64 * 1024;
// Refusals kept for the server's log between two take_refusals().
inline constexpr std::size_t kMaxRefusalNotes = 64;

}  // namespace pstrain
