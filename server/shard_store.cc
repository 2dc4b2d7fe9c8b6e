#include "server/shard_store.h"

#include <cmath>

namespace pstrain {

namespace {

std::string where(const char* op, std::int64_t key, int worker, std::int64_t step) {
  return std::string(op) + " of chunk " + std::to_string(key) + " from worker " + std::to_string(worker) +
         " at step " + std::to_string(step);
}

// Index of the first non-finite value, or -1; `count` gets how many there are.
// The common all-finite case is one branch-free pass over the exponent bits
// (vectorizes); only a bad buffer is scanned again for the first position.
std::int64_t first_non_finite(std::span<const float> values, std::int64_t& count) {
  const auto* bits = reinterpret_cast<const std::uint32_t*>(values.data());
  std::int64_t bad = 0;
  for (std::size_t i = 0; i < values.size(); ++i) bad += ((bits[i] >> 23) & 0xffu) == 0xffu ? 1 : 0;
  count = bad;
  if (bad == 0) return -1;
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (!std::isfinite(values[i])) return static_cast<std::int64_t>(i);
  }
  return -1;
}

}  // namespace

ShardStore::ShardStore(const ShardMap& map, int server_rank, int num_workers, Mode mode,
                       const OptimizerConfig& optimizer)
    : server_rank_(server_rank), num_workers_(num_workers), mode_(mode) {
  if (num_workers < 1) throw ConfigError("shard store: need at least 1 worker");
  const auto& ids = map.chunks_of(server_rank);
  chunks_.resize(ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const Chunk& chunk = map.chunk(ids[i]);
    ChunkState& c = chunks_[i];
    c.key = chunk.id;
    c.num_elems = chunk.num_elems;
    c.weights = std::make_shared<std::vector<float>>(static_cast<std::size_t>(chunk.num_elems), 0.0f);
    c.optimizer = make_optimizer(optimizer, chunk.num_elems);
    c.last_step.assign(static_cast<std::size_t>(num_workers), -1);
    c.pulled_version.assign(static_cast<std::size_t>(num_workers), 0);
    index_[chunk.id] = i;
  }
}

bool ShardStore::owns(std::int64_t key) const { return index_.count(key) != 0; }

ShardStore::ChunkState& ShardStore::state(std::int64_t key, const char* op) {
  auto it = index_.find(key);
  if (it == index_.end()) {
    throw RequestError(Status::kNotOwner, std::string(op) + " of chunk " + std::to_string(key) + ": server " +
                                              std::to_string(server_rank_) + " does not hold it");
  }
  return chunks_[it->second];
}

const ShardStore::ChunkState& ShardStore::state(std::int64_t key, const char* op) const {
  return const_cast<ShardStore*>(this)->state(key, op);
}

std::int64_t ShardStore::num_elems(std::int64_t key) const { return state(key, "lookup").num_elems; }
std::int64_t ShardStore::version(std::int64_t key) const { return state(key, "lookup").version; }

void ShardStore::init(std::int64_t key, std::span<const float> weights) {
  ChunkState& c = state(key, "init");
  if (c.initialized) {
    throw RequestError(Status::kRejected, "init of chunk " + std::to_string(key) + ": already initialized");
  }
  if (static_cast<std::int64_t>(weights.size()) != c.num_elems) {
    throw RequestError(Status::kBadRequest, "init of chunk " + std::to_string(key) + ": expected " +
                                                std::to_string(c.num_elems) + " elements, got " +
                                                std::to_string(weights.size()));
  }
  std::int64_t bad = 0;
  if (first_non_finite(weights, bad) >= 0) {
    throw RequestError(Status::kRejected, "init of chunk " + std::to_string(key) + ": " + std::to_string(bad) +
                                              " non-finite weights");
  }
  c.weights->assign(weights.begin(), weights.end());
  c.initialized = true;
  ++num_initialized_;
}

PushOutcome ShardStore::push(int worker, std::int64_t key, std::int64_t step, std::span<const float> grad, double lr) {
  ChunkState& c = state(key, "push");
  try {
    if (worker < 0 || worker >= num_workers_) {
      throw RequestError(Status::kBadRequest, where("push", key, worker, step) + ": worker rank outside [0, " +
                                                  std::to_string(num_workers_) + ")");
    }
    if (!c.initialized) {
      throw RequestError(Status::kRejected, where("push", key, worker, step) + ": chunk not initialized yet");
    }
    if (static_cast<std::int64_t>(grad.size()) != c.num_elems) {
      throw RequestError(Status::kBadRequest, where("push", key, worker, step) + ": expected " +
                                                  std::to_string(c.num_elems) + " elements, got " +
                                                  std::to_string(grad.size()));
    }
    if (!std::isfinite(lr) || lr < 0) {
      throw RequestError(Status::kBadRequest, where("push", key, worker, step) + ": invalid learning rate " +
                                                  std::to_string(lr));
    }
    std::int64_t bad = 0;
    std::int64_t first = -1;
    {
      TraceSpan span(trace_, TraceLevel::kAll, "finite check", "server");
      first = first_non_finite(grad, bad);
    }
    if (first >= 0) {
      throw RequestError(Status::kRejected, where("push", key, worker, step) + ": gradient has " +
                                                std::to_string(bad) + " non-finite values (first at element " +
                                                std::to_string(first) + "); not applied");
    }
    PushOutcome out = mode_ == Mode::kAsync ? push_async(c, worker, step, grad, lr)
                                            : push_sync(c, worker, step, grad, lr);
    ++stats_.pushes_accepted;
    return out;
  } catch (const RequestError&) {
    ++stats_.pushes_rejected;
    throw;
  }
}

void ShardStore::apply(ChunkState& c, std::span<const float> grad, double lr) {
  TraceSpan span(trace_, TraceLevel::kAll, "update", "server");
  span.arg("chunk", c.key).arg("version", c.version + 1);
  if (c.weights.use_count() > 1) {  // a pull reply is still sending these: copy on write
    c.weights = std::make_shared<std::vector<float>>(*c.weights);
  }
  c.optimizer->step(*c.weights, grad, lr);
  ++c.version;
  ++stats_.updates_applied;
}

PushOutcome ShardStore::push_sync(ChunkState& c, int worker, std::int64_t step, std::span<const float> grad,
                                  double lr) {
  auto& last = c.last_step[static_cast<std::size_t>(worker)];
  if (step < c.version) {
    throw RequestError(Status::kRejected, where("push", c.key, worker, step) + ": stale, the chunk is at version " +
                                              std::to_string(c.version));
  }
  if (step > c.version) {
    throw RequestError(Status::kRejected, where("push", c.key, worker, step) + ": ahead of the chunk's version " +
                                              std::to_string(c.version) + " (pull before pushing)");
  }
  if (last == step) {
    throw RequestError(Status::kRejected, where("push", c.key, worker, step) + ": duplicate, already counted");
  }
  last = step;
  if (num_workers_ == 1) {  // the mean is the gradient itself: apply it straight from the message
    apply(c, grad, lr);
    return PushOutcome{true, c.version, 0};
  }
  TraceSpan sum_span(trace_, TraceLevel::kAll, "sum", "server");
  sum_span.arg("arrival", c.arrivals + 1);
  float* sum = c.sum.data();
  const float* g = grad.data();
  if (c.arrivals == 0) {  // copy first...
    c.sum.assign(grad.begin(), grad.end());
    c.step_lr = lr;
  } else if (c.arrivals + 1 < num_workers_) {  // ...add the middle ones...
    for (std::size_t i = 0; i < grad.size(); ++i) sum[i] += g[i];
  } else {  // ...and fold the last one and the division by W into one pass.
    const float inv = 1.0f / static_cast<float>(num_workers_);
    const bool exact = (num_workers_ & (num_workers_ - 1)) == 0;  // power of two: * 1/W is exact
    if (exact) {
      for (std::size_t i = 0; i < grad.size(); ++i) sum[i] = (sum[i] + g[i]) * inv;
    } else {
      const auto workers = static_cast<float>(num_workers_);
      for (std::size_t i = 0; i < grad.size(); ++i) sum[i] = (sum[i] + g[i]) / workers;
    }
  }
  sum_span.end();
  if (++c.arrivals < num_workers_) return PushOutcome{false, c.version, 0};
  c.arrivals = 0;
  apply(c, c.sum, c.step_lr);
  return PushOutcome{true, c.version, 0};
}

PushOutcome ShardStore::push_async(ChunkState& c, int worker, std::int64_t step, std::span<const float> grad,
                                   double lr) {
  auto& last = c.last_step[static_cast<std::size_t>(worker)];
  if (step == last) {
    throw RequestError(Status::kRejected, where("push", c.key, worker, step) + ": duplicate, already applied");
  }
  if (step < last) {
    throw RequestError(Status::kRejected, where("push", c.key, worker, step) + ": stale, worker already pushed step " +
                                              std::to_string(last));
  }
  last = step;
  const std::int64_t staleness = c.version - c.pulled_version[static_cast<std::size_t>(worker)];
  apply(c, grad, lr);
  ++stats_.staleness_histogram[staleness];
  return PushOutcome{true, c.version, staleness};
}

bool ShardStore::ready(std::int64_t key, std::int64_t min_version) const {
  const ChunkState& c = state(key, "pull");
  return c.initialized && c.version >= min_version;
}

WeightsSnapshot ShardStore::snapshot(int worker, std::int64_t key) {
  ChunkState& c = state(key, "pull");
  if (worker >= 0 && worker < num_workers_) c.pulled_version[static_cast<std::size_t>(worker)] = c.version;
  return WeightsSnapshot{c.weights, c.version};
}

}  // namespace pstrain
