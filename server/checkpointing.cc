#include "server/checkpointing.h"

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

void ServerCheckpointer::after_push(const ShardStore& store, std::int64_t key) {
  if (interval_ <= 0) return;
  const std::int64_t clock = store.slowest_clock(key);
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
  CheckpointPart part;
  part.put_i64("step", step);
  part.put_i64("rank", rank_);
  std::vector<std::int64_t> keys;
  std::int64_t bytes = 0;
  for (const auto& [key, c] : pending_[step]) {
    keys.push_back(key);
    part.put_f32s(chunk_field(key, "weights"), c.weights);
    part.put_f32s(chunk_field(key, "optimizer"), c.optimizer_state);
    part.put_i64s(chunk_field(key, "meta"), {c.version, c.optimizer_steps});
    part.put_i64s(chunk_field(key, "clocks"), c.clocks);
    bytes += static_cast<std::int64_t>((c.weights.size() + c.optimizer_state.size()) * sizeof(float));
  }
  part.put_i64s("keys", keys);
  const StoreStats& s = store.stats();
  part.put_i64s("stats", stats_fields(s));
  std::vector<std::int64_t> histogram;
  for (const auto& [staleness, count] : s.staleness_histogram) histogram.insert(histogram.end(), {staleness, count});
  part.put_i64s("staleness_histogram", histogram);
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
                static_cast<long long>(keys.size()), static_cast<double>(bytes) / 1e6, ms);
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
