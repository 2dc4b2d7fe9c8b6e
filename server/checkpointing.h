// A server's side of checkpoints (common/checkpoint/checkpoint.h; the protocol is in
// docs/architecture.md, "Checkpoints and resume").
//
// Saving: a checkpoint at step S (S a multiple of checkpoint.interval_steps)
// holds each chunk as it is when every live worker has pushed its steps
// 0..S-1 and none has pushed step S. At each step boundary of a chunk (a
// push, skip, catch-up or drop that moved the slowest live worker's clock of
// that chunk) the server checks whether that clock has just reached S; if
// so it copies the chunk (weights, optimizer
// state, version, per-worker clocks). Sync: that is the moment the step S-1
// update is applied, before any pull for step S is answered. Async and ssp:
// the workers meet at the scheduler's barrier "checkpoint S" before pushing
// step S, so no step-S push can come before the copy. Once every chunk of the
// server has its copy for S, the part server-R.ckpt is written (atomically),
// still before the reply to the push that completed it, so a worker that has
// its replies knows the part is on disk.
//
// Restoring: the part of the server's rank is read from the checkpoint
// (checked against the manifest: size, CRC-32) and every chunk is set back;
// the chunks count as initialized, so workers pull instead of init.
//
// The initial part (cluster.on_server_failure = "restart"): a server that
// failed before the first checkpoint has no step-N part to come back from.
// So, once the workers' inits have set every chunk of a fresh server, it
// writes its shard as it is at step 0 (weights, zero optimizer state,
// versions, clocks) to ROOT/initial-server-R/step-T/ with a one-part manifest
// (each refresh a new step-T directory; the older ones go once it is complete),
// before the reply to the init that completed it, and until the first
// checkpoint replaces it with the shard at every max(1, interval / 8)
// steps (copied as for a checkpoint, when the slowest live worker's clock
// of each chunk reaches that step; not coordinated with the other servers,
// which a restart does not need). A server that rejoins and finds no
// complete checkpoint reloads that part instead (step T < interval) and
// catches up like any other (ShardStore::catch_up): the updates of its
// shard after T are lost and counted. (Step 0 alone was tried: a shard set
// back to its initial weights against the others' trained ones made the
// tiny sync run diverge.)
// Not thread-safe: called from the server's event loop.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>

#include "common/checkpoint/checkpoint.h"
#include "common/base/log.h"
#include "server/shard_store.h"

namespace pstrain {

// "server-3.ckpt".
std::string server_part_name(int rank);
// ROOT/initial-server-3: the initial parts' root (its step-T directories are
// not the job's step-N checkpoints).
std::filesystem::path initial_part_dir(const std::filesystem::path& root, int rank);
// The newest complete initial part of `rank` (its step-T directory); else none.
std::optional<std::filesystem::path> usable_initial_part(const std::filesystem::path& root, int rank);

class ServerCheckpointer {
 public:
  // interval_steps 0: never saves.
  ServerCheckpointer(std::int64_t interval_steps, std::filesystem::path root, Logger& log)
      : interval_(interval_steps), root_(std::move(root)), log_(log) {}

  void set_rank(int rank) { rank_ = rank; }
  // At a step boundary of chunk `key` in `store`: its slowest live clock may
  // have moved (an accepted push or skip that moved it,
  // PushOutcome::clock_advanced; a catch-up; a dropped worker). Called only
  // there, not after every push: between two boundaries the clock, and so
  // what this would copy, stays the same.
  void at_step_boundary(const ShardStore& store, std::int64_t key);
  std::int64_t parts_written() const { return parts_written_; }
  // Writes the initial part (above) once every chunk of `store` is set by
  // the workers' inits; `fingerprint` is the config's with the layout. Call
  // after each init; only the first call that finds the store complete writes.
  void enable_initial_part(CheckpointFingerprint fingerprint) { initial_fingerprint_ = std::move(fingerprint); }
  void after_init(const ShardStore& store);
  // A rejoined server (ServerOptions::rejoin): a part already on disk for a
  // step was written by the server it replaces and may be in a complete
  // checkpoint's manifest: it is kept, not overwritten.
  void keep_existing_parts() { keep_existing_ = true; }

 private:
  void write_part(const ShardStore& store, std::int64_t step);
  CheckpointPart encode_part(const ShardStore& store, const std::map<std::int64_t, ChunkCheckpoint>& copies,
                             std::int64_t step) const;

  std::int64_t interval_;
  std::filesystem::path root_;
  Logger& log_;
  int rank_ = 0;
  std::map<std::int64_t, std::int64_t> saved_step_;                            // key -> last step copied
  std::map<std::int64_t, std::map<std::int64_t, ChunkCheckpoint>> pending_;    // step -> key -> copy
  std::int64_t parts_written_ = 0;
  bool keep_existing_ = false;
  // Before the first checkpoint: the shard as it is when its slowest clock reaches a multiple of
  // max(1, interval / 8), replacing the initial part (same copy rule as a checkpoint's).
  void snapshot_before_first(const ShardStore& store, std::int64_t key, std::int64_t clock);
  void write_initial_part(const ShardStore& store, const std::map<std::int64_t, ChunkCheckpoint>& copies,
                          std::int64_t step);
  std::optional<CheckpointFingerprint> initial_fingerprint_;  // set: initial parts are written (until the first checkpoint)
  bool initial_written_ = false;
  std::map<std::int64_t, std::int64_t> snapshot_step_;                         // key -> last step copied
  std::map<std::int64_t, std::map<std::int64_t, ChunkCheckpoint>> snapshots_;  // step -> key -> copy
};

// Restores `store` (server `rank`) from checkpoint `dir`; `fingerprint` is
// the config's (with the number of parameters). ConfigError when the
// checkpoint was written for another config; CheckpointError when the part
// is missing or corrupt. Returns the checkpoint's step.
std::int64_t restore_server(ShardStore& store, const std::filesystem::path& dir, int rank,
                            const CheckpointFingerprint& fingerprint, Logger& log);

}  // namespace pstrain
