// A server's chunks: weights, optimizer state and the consistency bookkeeping.
// Pure logic, no sockets: the server's event loop feeds it decoded requests.
//
// sync: a chunk at version v accepts exactly one push per worker for step v;
//   the gradients are summed (the first copied, the rest added), and when all
//   W workers have pushed, one update with the mean is applied: version v+1.
//   A push for a step below v is stale, a second push by the same worker for v
//   is a duplicate, a push above v is ahead of the protocol: all rejected.
// async: every push is applied on arrival (version + 1). A worker's steps
//   must increase per chunk (duplicates and older steps are rejected).
//   Staleness = version at apply - version this worker last pulled.
// Non-finite gradients are rejected and nothing is applied.
// Weights are held in shared buffers: a pull reply may send them zero-copy
// while the store goes on updating (copy-on-write when a reply still holds one).
// Not thread-safe: owned by the server's event-loop thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/errors.h"
#include "common/optimizer.h"
#include "common/protocol.h"
#include "common/shard_map.h"
#include "common/trace.h"

namespace pstrain {

// A request the store refuses; `status` goes into the error reply.
class RequestError : public Error {
 public:
  RequestError(Status status, const std::string& what) : Error(what), status_(status) {}
  Status status() const { return status_; }

 private:
  Status status_;
};

struct PushOutcome {
  bool applied = false;         // an update happened with this push (async: always; sync: last arrival)
  std::int64_t version = 0;     // chunk version after the push
  std::int64_t staleness = 0;   // async only
};

struct WeightsSnapshot {
  std::shared_ptr<const std::vector<float>> weights;
  std::int64_t version = 0;
};

struct StoreStats {
  std::int64_t pushes_accepted = 0;
  std::int64_t pushes_rejected = 0;
  std::int64_t updates_applied = 0;
  std::map<std::int64_t, std::int64_t> staleness_histogram;  // async: staleness -> pushes
};

class ShardStore {
 public:
  ShardStore(const ShardMap& map, int server_rank, int num_workers, Mode mode, const OptimizerConfig& optimizer);

  bool owns(std::int64_t key) const;
  std::int64_t num_elems(std::int64_t key) const;  // throws RequestError if not owned
  bool all_initialized() const { return num_initialized_ == chunks_.size(); }

  // The initial weights of a chunk; a second init of the same chunk is rejected.
  void init(std::int64_t key, std::span<const float> weights);
  PushOutcome push(int worker, std::int64_t key, std::int64_t step, std::span<const float> grad, double lr);
  // Whether a pull for min_version can be answered now (initialized, version >= min_version).
  bool ready(std::int64_t key, std::int64_t min_version) const;
  // The current weights; records the version `worker` pulled (for staleness).
  WeightsSnapshot snapshot(int worker, std::int64_t key);
  std::int64_t version(std::int64_t key) const;

  const StoreStats& stats() const { return stats_; }
  // Level "all": spans "finite check", "sum" (sync) and "update" inside the
  // server's request span; null = none.
  void set_trace(TraceRecorder* trace) { trace_ = trace; }

 private:
  struct ChunkState {
    std::int64_t key = 0;
    std::int64_t num_elems = 0;
    bool initialized = false;
    std::int64_t version = 0;
    std::shared_ptr<std::vector<float>> weights;
    std::unique_ptr<Optimizer> optimizer;
    std::vector<float> sum;                  // sync: gradients of the current step
    int arrivals = 0;                        // sync: distinct workers that pushed this step
    double step_lr = 0.0;                    // sync: lr of the current step (first push's)
    std::vector<std::int64_t> last_step;     // per worker: last step pushed (-1: none)
    std::vector<std::int64_t> pulled_version;  // per worker: version last pulled
  };

  ChunkState& state(std::int64_t key, const char* op);
  const ChunkState& state(std::int64_t key, const char* op) const;
  void apply(ChunkState& c, std::span<const float> grad, double lr);
  PushOutcome push_sync(ChunkState& c, int worker, std::int64_t step, std::span<const float> grad, double lr);
  PushOutcome push_async(ChunkState& c, int worker, std::int64_t step, std::span<const float> grad, double lr);

  int server_rank_;
  int num_workers_;
  Mode mode_;
  std::vector<ChunkState> chunks_;       // owned chunks, by increasing key
  std::map<std::int64_t, std::size_t> index_;  // key -> position in chunks_
  std::size_t num_initialized_ = 0;
  StoreStats stats_;
  TraceRecorder* trace_ = nullptr;
};

}  // namespace pstrain
