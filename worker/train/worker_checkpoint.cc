#include "worker/train/worker_checkpoint.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>

#include "common/node/retry.h"
#include "common/node/scheduler_client.h"
#include "worker/train/epoch_members.h"
#include "worker/train/records.h"

namespace pstrain {

namespace fs = std::filesystem;

std::string worker_part_name(int rank) { return "worker-" + std::to_string(rank) + ".ckpt"; }

fs::path write_worker_part(const RunConfig& config, int rank, const WorkerCheckpoint& s) {
  CheckpointPart part;
  part.put_i64("step", s.step);
  part.put_i64("rank", rank);
  part.put_i64("dropout_step", static_cast<std::int64_t>(s.dropout_step));
  part.put_f64("time_s", s.time_s);
  part.put_i64("metrics_bytes", s.metrics_bytes);
  const TrainResult& r = s.result;
  part.put_i64s("counters", {r.images, r.skipped_steps});
  part.put_f64("compute_s", r.compute_s);
  part.put_f64("pull_s", r.pull_s);
  part.put_f64("push_s", r.push_s);
  part.put_f64("blocked_s", r.blocked_s);
  part.put_i64("optimizer_steps", s.optimizer_steps);
  if (!s.epoch_members.empty()) part.put_i64s("epoch_members", s.epoch_members);
  if (!s.params.empty()) {
    part.put_f32s("params", s.params);
    part.put_f32s("optimizer", s.optimizer_state);
  }
  const fs::path dir = checkpoint_root(config) / checkpoint_dir_name(s.step);
  write_checkpoint_part(dir, worker_part_name(rank), part);
  return dir;
}

namespace {
// Elastic membership: the workers training at the checkpoint's step by the
// history its parts hold (every part the same: EpochMembers::history_before)
// that wrote a part (a worker dropped before it wrote none). Without a
// history (no part has one): the workers with a part.
std::vector<int> checkpoint_members(const fs::path& dir, const std::vector<int>& with_part) {
  for (const int w : with_part) {
    const CheckpointPart part =  // before the manifest: the part checks itself
        CheckpointPart::decode(read_file_bytes(dir / worker_part_name(w)), worker_part_name(w));
    if (!part.has("epoch_members")) continue;
    std::vector<int> members;
    for (const int r : last_members(part.i64s("epoch_members"))) {
      if (std::binary_search(with_part.begin(), with_part.end(), r)) members.push_back(r);
    }
    return members;
  }
  return with_part;
}
}  // namespace

std::string complete_checkpoint(const RunConfig& config, std::int64_t step, std::int64_t num_params, int num_servers,
                                const std::function<bool()>& server_failed, bool* abandoned, bool record_members) {
  const auto start = std::chrono::steady_clock::now();
  const fs::path root = checkpoint_root(config);
  const fs::path dir = root / checkpoint_dir_name(step);
  std::vector<std::string> parts;
  for (int s = 0; s < num_servers; ++s) parts.push_back("server-" + std::to_string(s) + ".ckpt");
  // A server writes its part before the reply to the push that completes the
  // step, except when a dropped worker completes it: then it is written when
  // the server hears of the drop, which may be after this barrier. Wait for
  // the servers' parts (at most timeout_ms; a part still missing then is the
  // manifest's error).
  const auto limit = start + std::chrono::milliseconds(config.cluster.timeout_ms);
  const auto all_there = [&] {
    std::error_code ec;
    return std::all_of(parts.begin(), parts.end(), [&](const std::string& p) { return fs::exists(dir / p, ec); });
  };
  RetryOptions poll;
  poll.interval = std::chrono::milliseconds(10);
  const std::optional<bool> server_lost = retry_until(
      limit, "", nullptr,
      [&]() -> std::optional<bool> {
        if (all_there()) return false;
        if (server_failed && server_failed()) return true;
        return std::nullopt;
      },
      poll);
  if (server_lost.value_or(false)) {
    if (abandoned != nullptr) *abandoned = true;
    return "checkpoint " + dir.string() + " abandoned: a server failed before writing its part (its replacement "
           "reloads an older checkpoint); no manifest, so resume passes over it";
  }
  std::string missing;  // workers dropped by the failure policy write no part
  std::vector<int> with_part;
  const int slots = std::max(config.cluster.num_workers, max_workers(config.cluster));
  for (int w = 0; w < slots; ++w) {
    std::error_code ec;
    if (fs::exists(dir / worker_part_name(w), ec)) {
      parts.push_back(worker_part_name(w));
      with_part.push_back(w);
    } else if (w < config.cluster.num_workers) {
      missing += (missing.empty() ? "" : ", ") + std::to_string(w);
    }
  }
  const std::vector<int> members = record_members ? checkpoint_members(dir, with_part) : std::vector<int>{};
  const CheckpointManifest m =
      write_checkpoint_manifest(dir, step, checkpoint_fingerprint(config, num_params), parts, members, slots);
  const std::vector<fs::path> removed = prune_checkpoints(root, config.checkpoint.keep);
  std::int64_t bytes = 0;
  for (const auto& p : m.parts) bytes += p.bytes;
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  char line[300];
  std::snprintf(line, sizeof(line), "checkpoint %s complete: %zu parts, %.1f MB, manifest in %.1f ms%s",
                dir.string().c_str(), m.parts.size(), static_cast<double>(bytes) / 1e6, ms,
                removed.empty() ? "" : ("; pruned " + std::to_string(removed.size()) + " older").c_str());
  std::string text = line;
  if (!missing.empty()) text += "; no part of dropped worker(s) " + missing;
  return text;
}

void finish_ps_checkpoint(SchedulerClient& scheduler, int rank, const RunConfig& config, std::int64_t step,
                          std::int64_t num_params, int num_servers, std::int64_t server_failures_before, Logger& log) {
  if (lowest_live_worker(scheduler, config.cluster.timeout_ms) != rank) return;
  // A server that fails now never writes this checkpoint's part (its
  // replacement reloads an older one): the checkpoint is abandoned.
  const auto server_failed = [&] {
    scheduler.drain_incoming();
    return scheduler.server_failures() != server_failures_before;
  };
  bool abandoned = false;
  const std::string line = complete_checkpoint(config, step, num_params, num_servers, server_failed, &abandoned, true);
  if (abandoned) {
    log.warn(line);
  } else {
    log.info(line);
  }
}

namespace {

// Allreduce: the replicated model and optimizer state, from the worker part
// that holds them (the leader's when the checkpoint was taken: worker 0, or
// the lowest worker left after it was dropped; the first listed if several).
void read_replica(const fs::path& dir, const CheckpointManifest& m, WorkerCheckpoint& s) {
  for (const CheckpointPartInfo& p : m.parts) {
    if (!p.name.starts_with("worker-")) continue;
    const CheckpointPart part = read_checkpoint_part(dir, p.name);
    if (!part.has("params")) continue;
    s.params = part.f32s("params");
    s.optimizer_state = part.f32s("optimizer");
    return;
  }
  throw CheckpointError("cannot resume from " + dir.string() + ": no worker's part holds the model's weights");
}

}  // namespace

WorkerCheckpoint read_worker_part(const fs::path& dir, int rank, const RunConfig& config, std::int64_t num_params) {
  const CheckpointManifest m = read_checkpoint_manifest(dir);
  if (const std::string diff = fingerprint_mismatch(m.fingerprint, checkpoint_fingerprint(config, num_params));
      !diff.empty()) {
    throw ConfigError("cannot resume from " + dir.string() + ": it was written for another job: " + diff);
  }
  WorkerCheckpoint s;
  const bool listed = std::any_of(m.parts.begin(), m.parts.end(),
                                  [&](const CheckpointPartInfo& p) { return p.name == worker_part_name(rank); });
  if (!listed) {  // dropped before the checkpoint: it starts at the checkpoint's step with fresh counters
    s.step = m.step;
    s.dropout_step = static_cast<std::uint64_t>(m.step);
    s.metrics_bytes = -1;
    for (const CheckpointPartInfo& p : m.parts) {  // the epochs' workers, from a worker that has a part
      if (!p.name.starts_with("worker-")) continue;
      const CheckpointPart other = read_checkpoint_part(dir, p.name);
      if (other.has("epoch_members")) s.epoch_members = other.i64s("epoch_members");
      break;
    }
    if (rank == 0 && config.mode == Mode::kAllreduce) read_replica(dir, m, s);  // worker 0 broadcasts them
    return s;
  }
  const CheckpointPart part = read_checkpoint_part(dir, worker_part_name(rank));
  s.step = part.i64("step");
  if (s.step != m.step) {
    throw CheckpointError(part.what + ": step " + std::to_string(s.step) + ", the manifest's is " + std::to_string(m.step));
  }
  s.dropout_step = static_cast<std::uint64_t>(part.i64("dropout_step"));
  s.time_s = part.f64("time_s");
  s.metrics_bytes = part.i64("metrics_bytes");
  const auto& counters = part.i64s("counters");
  if (counters.size() != 2) throw CheckpointError(part.what + ": field 'counters' holds " + std::to_string(counters.size()) + " values");
  s.result.images = counters[0];
  s.result.skipped_steps = counters[1];
  s.result.compute_s = part.f64("compute_s");
  s.result.pull_s = part.f64("pull_s");
  s.result.push_s = part.f64("push_s");
  s.result.blocked_s = part.f64("blocked_s");
  s.optimizer_steps = part.i64("optimizer_steps");
  if (part.has("epoch_members")) s.epoch_members = part.i64s("epoch_members");
  if (part.has("params")) {
    s.params = part.f32s("params");
    s.optimizer_state = part.f32s("optimizer");
  } else if (rank == 0 && config.mode == Mode::kAllreduce) {
    read_replica(dir, m, s);
  }
  return s;
}

WorkerStart start_worker(const std::string& resume_dir, int rank, const RunConfig& config, std::int64_t num_params,
                         Logger& log) {
  WorkerStart start;
  const std::string metrics_file = "worker-" + std::to_string(rank) + ".jsonl";
  if (!resume_dir.empty()) {
    start.resume = read_worker_part(resume_dir, rank, config, num_params);
    log.info("resuming from " + resume_dir + " at step " + std::to_string(start.resume->step));
    start.metrics = std::make_unique<MetricsWriter>(config.output.run_dir, metrics_file, start.resume->metrics_bytes,
                                                    start.resume->time_s);
    write_resume_record(*start.metrics, start.resume->step);
  } else {
    start.metrics = std::make_unique<MetricsWriter>(config.output.run_dir, metrics_file);
  }
  start.metrics->set_log(&log);
  return start;
}

}  // namespace pstrain
