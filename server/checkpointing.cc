#include "server/checkpointing.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

namespace pstrain {

namespace fs = std::filesystem;

namespace {

std::string chunk_field(std::int64_t key, const char* what) { return "chunk." + std::to_string(key) + "." + what; }

std::vector<std::int64_t> stats_fields(const StoreStats& s) {
  return {s.pushes_accepted, s.pushes_rejected, s.updates_applied, s.partial_updates,
          s.skip_pushes,     s.empty_updates,   s.clock_gap_max};
}

StoreStats stats_from(const std::vector<std::int64_t>& v, const std::vector<std::int64_t>& histogram) {
  StoreStats s;
  if (v.size() != 7) throw CheckpointError("server part: field 'stats' holds " + std::to_string(v.size()) + " values, expected 7");
  s.pushes_accepted = v[0];
  s.pushes_rejected = v[1];
  s.updates_applied = v[2];
  s.partial_updates = v[3];
  s.skip_pushes = v[4];
  s.empty_updates = v[5];
  s.clock_gap_max = v[6];
  for (std::size_t i = 0; i + 1 < histogram.size(); i += 2) s.staleness_histogram[histogram[i]] = histogram[i + 1];
  return s;
}

}  // namespace

std::string server_part_name(int rank) { return "server-" + std::to_string(rank) + ".ckpt"; }

fs::path initial_part_dir(const fs::path& root, int rank) { return root / ("initial-server-" + std::to_string(rank)); }

std::optional<fs::path> usable_initial_part(const fs::path& root, int rank) {
  if (const auto found = find_newest_checkpoint(initial_part_dir(root, rank))) return found->dir;
  return std::nullopt;
}

void ServerCheckpointer::after_init(const ShardStore& store) {
  if (!initial_fingerprint_ || initial_written_ || !store.all_initialized()) return;
  std::map<std::int64_t, ChunkCheckpoint> copies;
  for (const std::int64_t key : store.keys()) copies[key] = store.save_chunk(key);
  write_initial_part(store, copies, 0);
  initial_written_ = true;
}

void ServerCheckpointer::snapshot_before_first(const ShardStore& store, std::int64_t key, std::int64_t clock) {
  if (!initial_fingerprint_ || !initial_written_) return;
  if (parts_written_ > 0 || clock >= interval_) {  // the checkpoints take over
    initial_fingerprint_.reset();
    snapshots_.clear();
    return;
  }
  const std::int64_t every = std::max<std::int64_t>(1, interval_ / 8);
  if (clock <= 0 || clock % every != 0) return;
  std::int64_t& taken = snapshot_step_[key];
  if (taken >= clock) return;
  taken = clock;
  auto& copies = snapshots_[clock];
  copies[key] = store.save_chunk(key);
  if (copies.size() == store.keys().size()) {
    write_initial_part(store, copies, clock);
    snapshots_.erase(snapshots_.begin(), snapshots_.upper_bound(clock));
  }
}

void ServerCheckpointer::write_initial_part(const ShardStore& store,
                                           const std::map<std::int64_t, ChunkCheckpoint>& copies, std::int64_t step) {
  const auto start = std::chrono::steady_clock::now();
  // A new directory per refresh, the older ones removed once it is complete:
  // a kill mid-write leaves the previous one whole (rewriting one directory's
  // part, then its manifest, left a part its manifest did not describe).
  const fs::path dir = initial_part_dir(root_, rank_) / checkpoint_dir_name(step);
  write_checkpoint_part(dir, server_part_name(rank_), encode_part(store, copies, step));
  write_checkpoint_manifest(dir, step, *initial_fingerprint_, {server_part_name(rank_)});
  prune_checkpoints(initial_part_dir(root_, rank_), 1);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  char line[160];
  std::snprintf(line, sizeof(line), " (%zu chunks, step %lld) in %.1f ms", copies.size(), static_cast<long long>(step), ms);
  const std::string what = step == 0 ? "wrote the initial part " : "refreshed the initial part ";
  if (step == 0) {
    log_.info(what + dir.string() + line + ": a restart before the first checkpoint comes back from it");
  } else {
    log_.debug(what + dir.string() + line);
  }
}

CheckpointPart ServerCheckpointer::encode_part(const ShardStore& store,
                                               const std::map<std::int64_t, ChunkCheckpoint>& copies,
                                               std::int64_t step) const {
  CheckpointPart part;
  part.put_i64("step", step);
  part.put_i64("rank", rank_);
  std::vector<std::int64_t> keys;
  for (const auto& [key, c] : copies) {
    keys.push_back(key);
    part.put_f32s(chunk_field(key, "weights"), c.weights);
    part.put_f32s(chunk_field(key, "optimizer"), c.optimizer_state);
    part.put_i64s(chunk_field(key, "meta"), {c.version, c.optimizer_steps});
    part.put_i64s(chunk_field(key, "clocks"), c.clocks);
  }
  part.put_i64s("keys", keys);
  const StoreStats& s = store.stats();
  part.put_i64s("stats", stats_fields(s));
  std::vector<std::int64_t> histogram;
  for (const auto& [staleness, count] : s.staleness_histogram) histogram.insert(histogram.end(), {staleness, count});
  part.put_i64s("staleness_histogram", histogram);
  return part;
}

void ServerCheckpointer::at_step_boundary(const ShardStore& store, std::int64_t key) {
  if (interval_ <= 0) return;
  const std::int64_t clock = store.slowest_clock(key);
  snapshot_before_first(store, key, clock);
  if (clock <= 0 || clock % interval_ != 0) return;
  std::int64_t& saved = saved_step_[key];
  if (saved >= clock) return;
  saved = clock;
  auto& copies = pending_[clock];
  copies[key] = store.save_chunk(key);
  if (copies.size() == store.keys().size()) write_part(store, clock);
}

void ServerCheckpointer::write_part(const ShardStore& store, std::int64_t step) {
  const auto start = std::chrono::steady_clock::now();
  const CheckpointPart part = encode_part(store, pending_[step], step);
  std::int64_t bytes = 0;
  for (const auto& [key, c] : pending_[step]) {
    bytes += static_cast<std::int64_t>((c.weights.size() + c.optimizer_state.size()) * sizeof(float));
  }
  const std::size_t num_keys = pending_[step].size();
  pending_.erase(step);
  const fs::path dir = root_ / checkpoint_dir_name(step);
  if (keep_existing_ && fs::exists(dir / server_part_name(rank_))) {
    log_.info("checkpoint " + checkpoint_dir_name(step) + ": kept the " + server_part_name(rank_) +
              " the failed server wrote");
    return;
  }
  write_checkpoint_part(dir, server_part_name(rank_), part);
  ++parts_written_;
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  char line[256];
  std::snprintf(line, sizeof(line), "checkpoint %s: wrote %s (%lld chunks, %.1f MB of state) in %.1f ms",
                checkpoint_dir_name(step).c_str(), server_part_name(rank_).c_str(),
                static_cast<long long>(num_keys), static_cast<double>(bytes) / 1e6, ms);
  log_.info(line);
}

std::int64_t restore_server(ShardStore& store, const fs::path& dir, int rank, const CheckpointFingerprint& fingerprint,
                            Logger& log) {
  const CheckpointManifest m = read_checkpoint_manifest(dir);
  if (const std::string diff = fingerprint_mismatch(m.fingerprint, fingerprint); !diff.empty()) {
    throw ConfigError("cannot resume from " + dir.string() + ": it was written for another job: " + diff);
  }
  const CheckpointPart part = read_checkpoint_part(dir, server_part_name(rank));
  const std::vector<std::int64_t>& keys = part.i64s("keys");
  if (keys != store.keys()) {
    throw ConfigError("cannot resume from " + dir.string() + ": " + server_part_name(rank) + " holds " +
                      std::to_string(keys.size()) + " chunks, this server's shard map gives it " +
                      std::to_string(store.keys().size()) + " others");
  }
  for (const std::int64_t key : keys) {
    ChunkCheckpoint c;
    c.key = key;
    c.weights = part.f32s(chunk_field(key, "weights"));
    c.optimizer_state = part.f32s(chunk_field(key, "optimizer"));
    const auto& meta = part.i64s(chunk_field(key, "meta"));
    if (meta.size() != 2) throw CheckpointError(part.what + ": bad meta of chunk " + std::to_string(key));
    c.version = meta[0];
    c.optimizer_steps = meta[1];
    c.clocks = part.i64s(chunk_field(key, "clocks"));
    store.restore_chunk(c);
  }
  store.restore_stats(stats_from(part.i64s("stats"), part.i64s("staleness_histogram")));
  log.info("resumed from " + dir.string() + " (step " + std::to_string(m.step) + "): " + std::to_string(keys.size()) +
           " chunks restored");
  return m.step;
}

}  // namespace pstrain
