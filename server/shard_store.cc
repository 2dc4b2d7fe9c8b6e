#include "server/shard_store.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <sstream>

namespace pstrain {

namespace {

std::string number(double x) {
  std::ostringstream os;
  os.precision(9);
  os << x;
  return os.str();
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

// A push's learning rate: finite, >= 0 and at most `max_lr` (0: no bound)
// with kLrTolerance; otherwise refused, blaming the pusher.
void check_lr(const std::string& what, int worker, double lr, double max_lr) {
  if (!std::isfinite(lr) || lr < 0) {
    throw RequestError(Status::kBadRequest, what + ": invalid learning rate " + number(lr) + "; not applied", worker);
  }
  if (max_lr > 0 && lr > max_lr * (1.0 + kLrTolerance)) {
    throw RequestError(Status::kRejected,
                       what + ": learning rate " + number(lr) + " is above the schedule's highest, " + number(max_lr) +
                           " (optimizer.lr, with schedule.linear_scaling); not applied",
                       worker);
  }
}

}  // namespace

ShardStore::ShardStore(const ShardMap& map, int server_rank, int num_workers, const StoreOptions& options)
    : server_rank_(server_rank), num_workers_(num_workers), options_(options),
      inverse_staleness_(options.optimizer.staleness_rule == "inverse") {
  if (num_workers < 1) throw ConfigError("shard store: need at least 1 worker");
  const auto& ids = map.chunks_of(server_rank);
  chunks_.resize(ids.size());
  std::vector<std::int64_t> elems(ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const Chunk& chunk = map.chunk(ids[i]);
    ChunkState& c = chunks_[i];
    c.key = chunk.id;
    c.num_elems = chunk.num_elems;
    c.offset = chunk.offset;
    c.weights = new_weights(chunk.num_elems, chunk.offset);
    c.optimizer = make_optimizer(options.optimizer, chunk.num_elems);
    c.optimizer->split_over(options.ranges);  // the update's pass over the apply threads
    c.pulled_version.assign(static_cast<std::size_t>(num_workers), 0);
    elems[i] = chunk.num_elems;
    index_[chunk.id] = i;
  }
  policy_ = make_consistency_policy(options.consistency, elems, num_workers, options.ranges);
}

bool ShardStore::owns(std::int64_t key) const { return index_.count(key) != 0; }

std::size_t ShardStore::position(std::int64_t key, const char* op) const {
  auto it = index_.find(key);
  if (it == index_.end()) {
    throw RequestError(Status::kNotOwner, std::string(op) + " of chunk " + std::to_string(key) + ": server " +
                                              std::to_string(server_rank_) + " does not hold it");
  }
  return it->second;
}

std::int64_t ShardStore::num_elems(std::int64_t key) const { return chunks_[position(key, "lookup")].num_elems; }
std::int64_t ShardStore::version(std::int64_t key) const { return chunks_[position(key, "lookup")].version; }

void ShardStore::init(std::int64_t key, std::span<const float> weights) {
  ChunkState& c = chunks_[position(key, "init")];
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
  std::copy(weights.begin(), weights.end(), c.weights->values.begin());
  c.weight_bound = Optimizer::kUnknownBound;
  c.initialized = true;
  ++num_initialized_;
}

PushOutcome ShardStore::push(int worker, std::int64_t key, std::int64_t step, std::span<const float> grad, double lr) {
  return push_gradient(worker, key, step, update::GradSource{grad.data(), nullptr, 1}, grad.size(), lr);
}

PushOutcome ShardStore::push(int worker, std::int64_t key, std::int64_t step, std::span<const std::uint16_t> grad,
                             double lr) {
  return push_gradient(worker, key, step, update::GradSource{nullptr, grad.data(), 1}, grad.size(), lr);
}

PushOutcome ShardStore::push(int worker, const Message& msg, std::vector<float>& scratch) {
  const Header& h = msg.header;
  const void* data = msg.payload.data();
  if (h.dtype == DType::kBFloat16 && reinterpret_cast<std::uintptr_t>(data) % alignof(std::uint16_t) == 0) {
    const auto n = static_cast<std::size_t>(h.num_elems);
    return push(worker, h.key, h.step, std::span<const std::uint16_t>(static_cast<const std::uint16_t*>(data), n),
                h.lr);
  }
  return push(worker, h.key, h.step, msg.float_payload(scratch), h.lr);
}

PushOutcome ShardStore::push_gradient(int worker, std::int64_t key, std::int64_t step, update::GradSource grad,
                                      std::size_t num_elems, double lr) {
  const std::size_t at = position(key, "push");
  ChunkState& c = chunks_[at];
  try {
    const std::string what = describe_push(key, worker, step);
    if (worker < 0 || worker >= num_workers_) {
      throw RequestError(Status::kBadRequest, what + ": worker rank outside [0, " + std::to_string(num_workers_) + ")");
    }
    if (!c.initialized) throw RequestError(Status::kRejected, what + ": chunk not initialized yet");
    if (auto dup = duplicate(c, at, worker, step)) return *dup;
    if (static_cast<std::int64_t>(num_elems) != c.num_elems) {
      throw RequestError(Status::kBadRequest, what + ": expected " + std::to_string(c.num_elems) + " elements, got " +
                                                  std::to_string(num_elems));
    }
    check_lr(what, worker, lr, options_.max_lr);
    if (num_elems > 0 && grad.f32 == nullptr && grad.bf16 == nullptr) {
      throw RequestError(Status::kBadRequest, what + ": no gradient values");
    }
    const PushRequest request{key, worker, step, grad, num_elems, lr};
    const std::int64_t slowest = policy_->slowest_clock(at);
    if (const std::optional<Update> arrival = policy_->update_on_arrival(at, c.version, request)) {
      // One pass: the update (async, ssp: as stale as the updates since the
      // worker's pull; sync: the last contribution of the step, added to the
      // sum of the others in this pass) is staged out of place while the
      // gradient is checked; with a NaN or Inf it is dropped and nothing has
      // changed.
      const std::optional<std::int64_t> stale =
          policy_->staleness(c.version, c.pulled_version[static_cast<std::size_t>(worker)]);
      double step_lr = arrival->lr;
      if (stale && inverse_staleness_ && *stale > 1) step_lr /= static_cast<double>(*stale);
      update::UpdateCheck check;
      {
        TraceSpan span(trace_, TraceLevel::kAll, "update", "server");
        span.arg("chunk", c.key).arg("version", c.version + 1);
        check = stage(c, arrival->grad, num_elems, step_lr);
      }
      if (check.bad_gradient != 0) reject_non_finite(request, check.bad_gradient);
      if (check.bad_result != 0 && !arrival->whole_step) refuse_push(c, request, check, step_lr);
      const std::optional<Update> update = policy_->on_push(at, c.version, request);  // records the step
      ++stats_.pushes_accepted;
      if (!update) throw ComputeError(what + ": the consistency policy staged an update, then applied none");
      if (check.bad_result != 0) {  // sync: the step's sum made it; the step completes without it
        refuse_step(c, *update, check);
        return PushOutcome{true, c.version, 0, policy_->slowest_clock(at) > slowest};
      }
      commit(c, *update);
      if (stale) ++stats_.staleness_histogram[*stale];
      return PushOutcome{true, c.version, stale.value_or(0), policy_->slowest_clock(at) > slowest};
    }
    std::optional<Update> update;
    {
      // The rank-ordered sum (only sync gets here: async and ssp apply every
      // push as it arrives), which checks the gradient as it adds it.
      TraceSpan span(trace_, TraceLevel::kAll, "sum", "server");
      update = policy_->on_push(at, c.version, request);
    }
    ++stats_.pushes_accepted;
    const bool advanced = policy_->slowest_clock(at) > slowest;
    if (!update) return PushOutcome{false, c.version, 0, advanced};
    apply(c, *update);  // sync: the mean of the sum, taken in the update's pass
    return PushOutcome{true, c.version, 0, advanced};
  } catch (const RequestError& e) {
    ++stats_.pushes_rejected;
    if (e.blamed() >= 0) {
      ++stats_.refused_by_worker[e.blamed()];
      note_refusal(e.blamed(), e.what());
    }
    throw;
  }
}

PushOutcome ShardStore::skip(int worker, std::int64_t key, std::int64_t step) {
  const std::size_t at = position(key, "push");
  ChunkState& c = chunks_[at];
  try {
    if (worker < 0 || worker >= num_workers_) {
      throw RequestError(Status::kBadRequest, "skip " + describe_push(key, worker, step) + ": worker rank outside [0, " +
                                                  std::to_string(num_workers_) + ")");
    }
    if (!c.initialized) throw RequestError(Status::kRejected, "skip " + describe_push(key, worker, step) + ": chunk not initialized yet");
    if (auto dup = duplicate(c, at, worker, step)) return *dup;
    PushRequest request{key, worker, step, {}, 0, 0.0};
    request.skip = true;
    const std::int64_t slowest = policy_->slowest_clock(at);
    const std::optional<Update> update = policy_->on_push(at, c.version, request);
    ++stats_.pushes_accepted;
    ++stats_.skip_pushes;
    const bool advanced = policy_->slowest_clock(at) > slowest;
    if (!update) return PushOutcome{false, c.version, 0, advanced};
    apply(c, *update);  // sync: this skip completed the step
    return PushOutcome{true, c.version, 0, advanced};
  } catch (const RequestError&) {
    ++stats_.pushes_rejected;
    throw;
  }
}

std::optional<PushOutcome> ShardStore::duplicate(ChunkState& c, std::size_t at, int worker, std::int64_t step) {
  if (!policy_->live(worker)) return std::nullopt;  // the policy refuses a dropped worker's push
  if (step >= policy_->worker_clock(at, worker)) return std::nullopt;
  // Pushed before (worker steps increase per chunk): a resend after a lost
  // reply or a reconnect. Catching up, it is one the failed server took.
  ++(policy_->catching_up(at) ? stats_.lost_pushes : stats_.duplicate_pushes);
  return PushOutcome{false, c.version, 0};
}

void ShardStore::count_lost(ChunkState& c, std::int64_t updates) {
  if (updates <= 0) return;
  stats_.lost_updates += updates;
  stats_.lost_updates_by_chunk[c.key] += updates;
}

void ShardStore::begin_catch_up(std::int64_t restored_step) {
  stats_.rejoined_from_step = restored_step;
  policy_->begin_catch_up();
}

bool ShardStore::catch_up(int worker, std::int64_t key, std::int64_t step, bool pull) {
  const std::size_t at = position(key, pull ? "pull" : "push");
  ChunkState& c = chunks_[at];
  if (!policy_->catching_up(at) || !c.initialized || worker < 0 || worker >= num_workers_ || !policy_->live(worker)) {
    return false;
  }
  const std::int64_t version_before = c.version;
  const std::int64_t clock_before = policy_->worker_clock(at, worker);
  const CatchUp found = policy_->catch_up(at, c.version, key, worker, step, pull);
  count_lost(c, found.lost_updates);
  if (found.version != c.version) {  // every worker pushed the steps below it, having pulled them
    c.version = found.version;
    std::fill(c.pulled_version.begin(), c.pulled_version.end(), found.version);
  }
  if (found.lost_push) ++stats_.lost_pushes;
  if (found.update) apply(c, *found.update);
  return c.version != version_before || policy_->worker_clock(at, worker) != clock_before;
}

update::UpdateCheck ShardStore::stage(ChunkState& c, update::GradSource grad, std::size_t num_elems, double lr) {
  if (options_.in_place && c.weights.use_count() == 1) {
    // No reply holds the weights: whoever let go of them last is done
    // reading (the count's decrement releases; this fence acquires it).
    std::atomic_thread_fence(std::memory_order_acquire);
    if (const auto bound = c.optimizer->update_in_place(c.weights->values, c.weight_bound, grad, num_elems, lr)) {
      c.in_place = true;
      c.weight_bound = *bound;
      return update::UpdateCheck{};  // clean: the bound said so, and nothing out of it was taken
    }
  }
  c.in_place = false;
  // The new weights go to a spare buffer: the current ones stay as they are
  // for pull replies still sending them (zero-copy, no copy on write). A
  // spare still held by an older reply is left to it.
  constexpr std::size_t kMaxSpares = 3;
  std::size_t at = 0;
  while (at < c.spares.size() && c.spares[at].use_count() > 1) ++at;
  if (at == c.spares.size()) {
    std::shared_ptr<WeightBuffer> fresh = new_weights(c.num_elems, c.offset);
    if (c.spares.size() < kMaxSpares) {
      c.spares.push_back(std::move(fresh));
    } else {
      at = 0;
      c.spares[at] = std::move(fresh);  // the replies holding the old one free it
    }
  }
  c.staged = at;
  return c.optimizer->stage(c.weights->values, c.spares[at]->values, grad, num_elems, lr);
}

void ShardStore::commit(ChunkState& c, const Update& update) {
  if (c.in_place) {  // the optimizer committed as it wrote
    ++stats_.in_place_updates;
  } else {
    c.optimizer->commit();
    std::swap(c.weights, c.spares[c.staged]);
    c.weight_bound = Optimizer::kUnknownBound;
  }
  c.in_place = false;
  ++c.version;
  ++stats_.updates_applied;
  if (update.partial) ++stats_.partial_updates;  // a dropped worker's gradient is missing (skips are skip_pushes)
}

void ShardStore::apply(ChunkState& c, const Update& update) {
  if (update.unchecked) {  // only push_gradient's arrival path, which checks it as it stages it, may apply it
    throw ComputeError("chunk " + std::to_string(c.key) + ": the consistency policy returned an unchecked push's "
                       "gradient outside the pass that checks it");
  }
  if (update.contributors == 0) {  // sync, every worker skipped (or the rest dropped): the weights stay, the step is done
    ++c.version;
    ++stats_.empty_updates;
    return;
  }
  update::UpdateCheck check;
  {
    TraceSpan span(trace_, TraceLevel::kAll, "update", "server");
    span.arg("chunk", c.key).arg("version", c.version + 1);
    // The gradients were checked as they came in; a sum that overflowed, or
    // an update that would, shows in the result's check.
    check = stage(c, update.grad, update.num_elems, update.lr);
  }
  if (!check.clean()) return refuse_step(c, update, check);
  commit(c, update);
}

void ShardStore::refuse_push(const ChunkState& c, const PushRequest& push, const update::UpdateCheck& check,
                             double lr) {
  throw RequestError(Status::kRejected,
                     describe_push(push.key, push.worker, push.step) + ": the update would make " +
                         std::to_string(check.bad_result) + " weights or optimizer values non-finite (" +
                         describe_result(c, push.grad, check, lr) + "); not applied, the weights are unchanged",
                     push.worker);
}

void ShardStore::refuse_step(ChunkState& c, const Update& update, const update::UpdateCheck& check) {
  const std::vector<int> contributors = policy_->step_contributors(position(c.key, "apply"));
  std::string names;
  for (const int w : contributors) names += (names.empty() ? "" : ", ") + std::to_string(w);
  const std::string why = "step " + std::to_string(c.version) + " of chunk " + std::to_string(c.key) +
                          ": the update of the summed gradients of worker(s) " + names + " would make " +
                          std::to_string(check.bad_result + check.bad_gradient) +
                          " weights or optimizer values non-finite (" +
                          describe_result(c, update.grad, check, update.lr) +
                          "); step refused: the weights are unchanged and the step is complete without it "
                          "(if every step is refused, the rate is too high: lower optimizer.lr)";
  ++c.version;
  ++stats_.refused_steps;
  for (const int w : contributors) ++stats_.refused_by_worker[w];
  note_refusal(contributors.empty() ? -1 : contributors.front(), why);
}

std::string ShardStore::describe_result(const ChunkState& c, const update::GradSource& grad,
                                        const update::UpdateCheck& check, double lr) const {
  if (check.first_bad_result < 0) return "a NaN or Inf in the summed gradient";
  const auto i = static_cast<std::size_t>(check.first_bad_result);
  float g = grad.bf16 != nullptr ? std::bit_cast<float>(static_cast<std::uint32_t>(grad.bf16[i]) << 16)
                                 : grad.f32 != nullptr ? grad.f32[i] : 0.0f;
  if (grad.partial != nullptr) g += grad.partial[i];
  if (grad.mean_of > 1) g /= static_cast<float>(grad.mean_of);
  std::ostringstream os;
  os.precision(9);
  os << "first at element " << i << ": weight " << c.weights->values[i] << " -> " << c.spares[c.staged]->values[i]
     << " (gradient " << g << ", lr " << lr << ")";
  return os.str();
}

void ShardStore::note_refusal(int worker, const std::string& why) {
  if (refusals_.size() < kMaxRefusalNotes) refusals_.push_back(Refusal{worker, why});
}

bool ShardStore::ready(std::int64_t key, int worker, std::int64_t step) const {
  const std::size_t at = position(key, "pull");
  const ChunkState& c = chunks_[at];
  return c.initialized && policy_->pull_ready(at, c.version, worker, step);
}

WeightsSnapshot ShardStore::snapshot(int worker, std::int64_t key, std::int64_t step) {
  const std::size_t at = position(key, "pull");
  ChunkState& c = chunks_[at];
  if (worker >= 0 && worker < num_workers_) c.pulled_version[static_cast<std::size_t>(worker)] = c.version;
  stats_.clock_gap_max = std::max(stats_.clock_gap_max, policy_->clock_gap(at, step));
  return WeightsSnapshot{c.weights, c.version};
}

std::vector<std::int64_t> ShardStore::drop_worker(int worker) {
  std::vector<std::optional<Update>> updates = policy_->drop_worker(worker);
  std::vector<std::int64_t> advanced;
  for (std::size_t i = 0; i < updates.size(); ++i) {
    if (!updates[i]) continue;
    apply(chunks_[i], *updates[i]);
    advanced.push_back(chunks_[i].key);
  }
  return advanced;
}

std::vector<std::int64_t> ShardStore::rejoin_worker(int worker) {
  std::vector<std::int64_t> versions;
  versions.reserve(chunks_.size());
  for (const ChunkState& c : chunks_) versions.push_back(c.version);
  return policy_->rejoin_worker(worker, versions);
}

void ShardStore::vacate(int worker) { policy_->vacate(worker); }

void ShardStore::join_worker(int worker, std::int64_t start) {
  std::vector<std::int64_t> versions;
  versions.reserve(chunks_.size());
  for (const ChunkState& c : chunks_) versions.push_back(c.version);
  policy_->join_worker(worker, start, versions);
}

std::int64_t ShardStore::next_step(int worker, std::int64_t key) const {
  const std::size_t at = position(key, "pull");
  if (worker < 0 || worker >= num_workers_) {
    throw RequestError(Status::kBadRequest, "worker rank " + std::to_string(worker) + " outside [0, " +
                                                std::to_string(num_workers_) + ")");
  }
  return policy_->worker_clock(at, worker);
}

std::int64_t ShardStore::slowest_clock(std::int64_t key) const {
  return policy_->slowest_clock(position(key, "checkpoint"));
}

std::vector<std::int64_t> ShardStore::keys() const {
  std::vector<std::int64_t> out;
  for (const ChunkState& c : chunks_) out.push_back(c.key);
  return out;
}

ChunkCheckpoint ShardStore::save_chunk(std::int64_t key) const {
  const std::size_t at = position(key, "checkpoint");
  const ChunkState& c = chunks_[at];
  ChunkCheckpoint out;
  out.key = key;
  out.version = c.version;
  out.weights.assign(c.weights->values.begin(), c.weights->values.end());
  out.optimizer_state = c.optimizer->state();
  out.optimizer_steps = c.optimizer->steps_taken();
  for (int w = 0; w < num_workers_; ++w) out.clocks.push_back(policy_->worker_clock(at, w));
  return out;
}

void ShardStore::restore_chunk(const ChunkCheckpoint& saved) {
  const std::size_t at = position(saved.key, "restore");
  ChunkState& c = chunks_[at];
  const std::string what = "restore of chunk " + std::to_string(saved.key);
  if (static_cast<std::int64_t>(saved.weights.size()) != c.num_elems) {
    throw ConfigError(what + ": the checkpoint holds " + std::to_string(saved.weights.size()) +
                      " weights, the shard map " + std::to_string(c.num_elems));
  }
  if (saved.clocks.size() != static_cast<std::size_t>(num_workers_)) {
    throw ConfigError(what + ": the checkpoint has clocks of " + std::to_string(saved.clocks.size()) +
                      " workers, the job has " + std::to_string(num_workers_));
  }
  c.optimizer->set_state(saved.optimizer_state, saved.optimizer_steps);
  c.weights = new_weights(c.num_elems, c.offset);
  c.weight_bound = Optimizer::kUnknownBound;
  std::copy(saved.weights.begin(), saved.weights.end(), c.weights->values.begin());
  c.version = saved.version;
  for (int w = 0; w < num_workers_; ++w) {
    policy_->restore_clock(at, w, saved.clocks[static_cast<std::size_t>(w)]);
    c.pulled_version[static_cast<std::size_t>(w)] = saved.version;
  }
  if (!c.initialized) ++num_initialized_;
  c.initialized = true;
}

std::shared_ptr<WeightBuffer> ShardStore::new_weights(std::int64_t num_elems, std::int64_t offset) const {
  const auto n = static_cast<std::size_t>(num_elems);
  if (options_.allocate) {
    // Placed at the chunk's offset in the workers' flat buffer modulo the
    // page (a worker maps the reply's whole pages into its model instead of
    // copying them: worker/client/pull_pages.h): one page more, the weights
    // start that far into the page-aligned block.
    const std::size_t page_floats = kWeightsPageBytes / sizeof(float);
    const bool placed = n * sizeof(float) >= kPlacedWeightsBytes;
    SendFloats block = options_.allocate(placed ? n + page_floats : n);
    std::span<float> values = block.values.first(n);
    if (placed && reinterpret_cast<std::uintptr_t>(block.values.data()) % kWeightsPageBytes == 0) {
      values = block.values.subspan(static_cast<std::size_t>(offset) % page_floats, n);
    }
    return std::make_shared<WeightBuffer>(WeightBuffer{values, std::move(block.owner)});
  }
  auto owned = std::make_shared<std::vector<float>>(n, 0.0f);
  std::span<float> values(*owned);
  return std::make_shared<WeightBuffer>(WeightBuffer{values, std::move(owned)});
}

}  // namespace pstrain
