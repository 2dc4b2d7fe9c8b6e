#include "worker/train/allreduce_worker.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

#include "common/base/errors.h"
#include "worker/collective/gradient_buckets.h"
#include "worker/collective/replica_resync.h"
#include "worker/nn/device_buffer.h"
#include "worker/nn/device_optimizer.h"
#include "worker/train/checkpoint.h"
#include "worker/train/divergence.h"
#include "worker/train/epoch_driver.h"
#include "worker/train/epoch_members.h"
#include "worker/train/ps_rejoin.h"
#include "worker/train/simulated_compute.h"
#include "worker/train/straggler.h"

namespace pstrain {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_between(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// Per-run state of the loop, to keep each function short.
struct Loop {
  const RunConfig& config;
  WorkerSession& session;
  nn::Model& model;
  const data::DatasetPair& data;
  Collective* collective;  // the job's, or `owned` once re-formed
  nn::DeviceOptimizer& optimizer;
  MetricsWriter& metrics;
  Logger& log;
  std::vector<float> staging;  // host gradients when the collective cannot read the backend's memory
  std::vector<float> images;
  std::vector<std::int32_t> labels;
  TrainResult result;
  double last_compute_s = 0.0;
  Straggler straggler;
  bool buckets_logged = false;
  std::vector<float> simulated_grads;  // simulated compute: the gradients every step (empty otherwise)
  TraceRecorder* trace = nullptr;
  NonFiniteGuard guard;
  std::vector<float> check_grads;      // "skip" on a GPU without staging: the averaged gradients, to check
  const ReformCollective* reform = nullptr;
  std::unique_ptr<Collective> owned;   // the collective re-formed without dropped workers
  std::vector<int> live;               // workers' ranks still in the job, ascending
  int generation = 0;
  EpochMembers* members = nullptr;  // each epoch's workers (recorded in checkpoints)
  // The last collective phase this replica completed (replica_resync.h: step
  // s is 4s + 1, the checkpoint after it 4s + 2, the check after an epoch
  // ending at n steps 4n); a phase at or before it is not run again (after a
  // re-form took a replica further on).
  std::int64_t done = -1;
  std::vector<float> checkpoint_token{};  // the checkpoint's collective operation (kept: it may outlive a failed wait)
  std::map<int, std::int64_t> rejoined{};  // "restart": workers heard to have rejoined (rank -> take), not yet taken in
};

// Whether this worker evaluates and writes the final weights: worker 0, or
// the lowest worker left once it has been dropped.
bool leads(const Loop& L) { return !L.live.empty() && L.live.front() == L.session.rank(); }

bool staged(const Loop& L) { return L.collective->device_memory() != L.model.backend().is_cuda(); }

// Runs `op` on a copy of `host` in the collective's memory space, then copies back.
void on_collective_memory(Loop& L, std::span<float> host, const std::function<void(float*)>& op) {
  if (!L.collective->device_memory()) {
    op(host.data());
    return;
  }
  nn::DeviceBuffer buffer(L.model.backend(), host.size_bytes());
  buffer.upload<float>(host);
  L.model.backend().synchronize();
  op(buffer.f32());
  buffer.download<float>(host);
}

// Waits for every started collective operation, handling the scheduler's
// messages meanwhile so an abort of the job reaches this worker promptly.
// A peer the scheduler dropped meanwhile ends the wait at once (when the
// collective may be re-formed), not at the collective's timeout.
void wait_collective(Loop& L) {
  while (!L.collective->wait_all(std::chrono::milliseconds(200))) {
    if (L.session.scheduler().handle_incoming()) {
      throw AbortedError("the scheduler ended the job while worker " + std::to_string(L.session.rank()) +
                         " was training");
    }
    if (L.reform != nullptr) {
      bool dropped = false;
      for (const int r : L.session.scheduler().take_dropped()) {
        dropped = dropped || std::erase(L.live, r) > 0;
      }
      if (dropped) throw TransportError("a worker of the collective was dropped from the job");
    }
  }
}

// FNV-1a of the weights' bytes as three 11-bit integers: exact in float, and
// so is their mean over the ranks, which equals every rank's own value only
// when all are equal.
std::array<float, 3> weights_fingerprint(std::span<const float> params) {
  std::uint64_t hash = 1469598103934665603ull;
  const auto* bytes = reinterpret_cast<const unsigned char*>(params.data());
  for (std::size_t i = 0; i < params.size_bytes(); ++i) hash = (hash ^ bytes[i]) * 1099511628211ull;
  return {static_cast<float>(hash & 2047u), static_cast<float>((hash >> 11) & 2047u),
          static_cast<float>((hash >> 22) & 2047u)};
}

// Whether rejoined workers are taken back into the collective (cluster.on_worker_failure = "restart").
bool grows(const Loop& L) { return L.reform != nullptr && L.config.cluster.on_worker_failure == "restart"; }

// The replica check at an epoch's end. Under "restart" the same allreduce
// carries, per worker rank, the take of a rejoin this replica has heard of
// (and a 1, to count the replicas that heard it), so every replica returns
// the same workers to take in (rank -> take), however late each heard.
std::map<int, std::int64_t> check_replicas(Loop& L, const char* when) {
  std::vector<float> params(static_cast<std::size_t>(L.model.num_params()));
  L.model.get_params(params);
  const std::array<float, 3> mine = weights_fingerprint(params);
  const auto workers = static_cast<std::size_t>(L.session.num_workers());
  std::vector<float> v(mine.begin(), mine.end());
  if (grows(L)) {
    v.resize(3 + 2 * workers, 0.0f);
    for (const auto& r : L.session.scheduler().take_rejoined()) {
      std::int64_t& take = L.rejoined[r.rank];
      take = std::max(take, r.take);
    }
    for (const auto& [rank, take] : L.rejoined) {
      if (rank < 0 || static_cast<std::size_t>(rank) >= workers || take >= (1 << 20)) continue;
      if (std::find(L.live.begin(), L.live.end(), rank) != L.live.end()) continue;
      v[3 + 2 * static_cast<std::size_t>(rank)] = static_cast<float>(take);
      v[4 + 2 * static_cast<std::size_t>(rank)] = 1.0f;
    }
  }
  on_collective_memory(L, v, [&](float* data) { L.collective->allreduce_mean(data, v.size()); });
  const std::array<float, 3> mean{v[0], v[1], v[2]};
  if (mean != mine) {
    throw ComputeError(std::string("replica check ") + when + ": worker " + std::to_string(L.session.rank()) +
                       "'s weights differ from another worker's (fingerprint " + std::to_string(mine[0]) + "/" +
                       std::to_string(mine[1]) + "/" + std::to_string(mine[2]) + ", mean over workers " +
                       std::to_string(mean[0]) + "/" + std::to_string(mean[1]) + "/" + std::to_string(mean[2]) + ")");
  }
  std::map<int, std::int64_t> joiners;
  const auto ranks = static_cast<double>(L.collective->size());
  for (std::size_t r = 0; 3 + 2 * r + 1 < v.size(); ++r) {
    const std::int64_t heard = std::llround(static_cast<double>(v[4 + 2 * r]) * ranks);
    if (heard > 0) joiners[static_cast<int>(r)] = std::llround(static_cast<double>(v[3 + 2 * r]) * ranks) / heard;
  }
  return joiners;
}

int resync_replicas(Loop& L);

// "restart": takes the rejoined workers `joiners` (agreed by check_replicas)
// into the collective after `steps_done` steps (an epoch's end): the next
// generation with them, published for them by the lowest worker, then the
// resync in which they take the most advanced replica.
void grow_collective(Loop& L, const std::map<int, std::int64_t>& joiners, std::int64_t steps_done) {
  AllreduceJoin join{L.live, L.generation + 1, steps_done};
  std::string names;
  for (const auto& [rank, take] : joiners) {
    join.live.push_back(rank);
    names += (names.empty() ? "" : ", ") + std::to_string(rank);
  }
  std::sort(join.live.begin(), join.live.end());
  join.live.erase(std::unique(join.live.begin(), join.live.end()), join.live.end());
  if (leads(L)) {
    for (const auto& [rank, take] : joiners) L.session.scheduler().store_set(allreduce_join_key(rank, take), format_join(join));
  }
  for (const auto& [rank, take] : joiners) L.rejoined.erase(rank);
  const auto me = std::find(join.live.begin(), join.live.end(), L.session.rank());
  const int rank = static_cast<int>(me - join.live.begin());
  const int size = static_cast<int>(join.live.size());
  L.collective = nullptr;
  L.owned.reset();
  L.live = join.live;
  L.generation = join.generation;
  L.owned = (*L.reform)(rank, size, L.generation);
  L.collective = L.owned.get();
  const int leader = resync_replicas(L);
  L.log.warn("took rejoined worker(s) " + names + " back into the collective after step " + std::to_string(steps_done) +
             ": " + std::to_string(size) + " workers, this one rank " + std::to_string(rank) + ", generation " +
             std::to_string(L.generation) + "; replicas took worker " + std::to_string(leader) + "'s weights");
}

void broadcast_initial(Loop& L) {
  std::vector<float> params(static_cast<std::size_t>(L.model.num_params()));
  L.model.get_params(params);
  on_collective_memory(L, params, [&](float* data) { L.collective->broadcast(data, params.size(), 0); });
  L.model.set_params(params);
}

// Resume: the saved model and optimizer state to every replica from worker 0,
// which read them from the part that holds them (that of the worker that led
// when the checkpoint was taken: read_worker_part); the others' own parts hold
// only their position and optimizer step count.
void broadcast_resumed(Loop& L, const WorkerCheckpoint& resume) {
  std::vector<float> params(static_cast<std::size_t>(L.model.num_params()));
  std::vector<float> state = L.optimizer.state();
  if (L.session.rank() == 0) {
    if (resume.params.size() != params.size() || resume.optimizer_state.size() != state.size()) {
      throw ConfigError("resume: the checkpoint holds " + std::to_string(resume.params.size()) + " parameters and " +
                        std::to_string(resume.optimizer_state.size()) + " optimizer values; this model and optimizer "
                        "need " + std::to_string(params.size()) + " and " + std::to_string(state.size()));
    }
    params = resume.params;
    state = resume.optimizer_state;
  }
  on_collective_memory(L, params, [&](float* data) { L.collective->broadcast(data, params.size(), 0); });
  if (!state.empty()) {
    on_collective_memory(L, state, [&](float* data) { L.collective->broadcast(data, state.size(), 0); });
  }
  L.model.set_params(params);
  L.optimizer.set_state(state, resume.optimizer_steps);
}

// A checkpoint after `steps_done` steps: every worker its part (the leader,
// the lowest live worker, with the replicated model and optimizer state),
// then a collective operation (a 1-float allreduce) in place of a barrier,
// then the leader writes the manifest. Being an operation of the collective,
// not a barrier at the scheduler, a failure in it is handled like any other
// (re-form, resync), and a worker that rejoined but is not yet in the
// collective does not hold it up. It completes on a replica only once every
// replica has written its part.
void take_checkpoint(Loop& L, std::int64_t steps_done) {
  TraceSpan span(L.trace, TraceLevel::kSteps, "checkpoint", "worker");
  span.arg("step", steps_done);
  WorkerCheckpoint c;
  c.step = steps_done;
  c.dropout_step = L.model.dropout_step();
  c.time_s = L.metrics.elapsed_s();
  c.metrics_bytes = L.metrics.size();
  c.result = L.result;
  if (L.members != nullptr) c.epoch_members = L.members->history();
  c.optimizer_steps = L.optimizer.steps_taken();
  if (leads(L)) {
    c.params.resize(static_cast<std::size_t>(L.model.num_params()));
    L.model.get_params(c.params);
    c.optimizer_state = L.optimizer.state();
  }
  write_worker_part(L.config, L.session.rank(), c);
  L.checkpoint_token.assign(1, 1.0f);
  on_collective_memory(L, L.checkpoint_token, [&](float* data) {
    L.collective->start_allreduce_mean(data, 1);
    wait_collective(L);
  });
  L.done = checkpoint_phase(steps_done - 1);
  if (leads(L)) L.log.info(complete_checkpoint(L.config, steps_done, L.model.num_params(), 0));
}

// After a resync: when the replicas' progress is past the phase of the newest
// checkpoint due but its manifest is missing (the worker that completed its
// operation and would have written it was not the leader, or died before),
// the leader writes it: every replica wrote its part before that operation.
void complete_missed_checkpoint(Loop& L) {
  if (!leads(L) || L.config.checkpoint.interval_steps <= 0 || L.done < checkpoint_phase(0)) return;
  std::int64_t steps_done = (L.done - checkpoint_phase(0)) / 4 + 1;  // the newest checkpoint phase <= done: after steps_done steps
  steps_done -= steps_done % L.config.checkpoint.interval_steps;
  if (!checkpoint_due(L.config, steps_done)) return;
  std::error_code ec;
  const auto dir = checkpoint_root(L.config) / checkpoint_dir_name(steps_done);
  if (std::filesystem::exists(dir / "manifest.json", ec) || !std::filesystem::exists(dir, ec)) return;
  L.log.info("completing the checkpoint after step " + std::to_string(steps_done) +
             " whose collective operation another replica completed: " +
             complete_checkpoint(L.config, steps_done, L.model.num_params(), 0));
}

// time_s: when training reached these weights (the record's time axis).
void evaluate_and_record(Loop& L, std::int64_t step, int epoch, double time_s) {
  if (!L.simulated_grads.empty()) return;  // no test set under simulated compute
  TraceSpan span(L.trace, TraceLevel::kSteps, "eval", "worker");
  span.arg("step", step).arg("epoch", epoch);
  const EvalResult r = evaluate(L.model, L.data.test);
  L.result.final_test_accuracy = r.accuracy;
  write_eval_record(L.metrics, L.log, step, epoch, r, time_s);
}

void log_buckets(Loop& L, const GradientBuckets& buckets) {
  if (L.buckets_logged || L.session.rank() != 0) return;
  L.buckets_logged = true;
  std::string text = "gradients in " + std::to_string(buckets.buckets_started()) + " bucket(s) of at least " +
                     std::to_string(L.config.collective.bucket_bytes) + " bytes, in start order (elements):";
  for (const auto& [begin, end] : buckets.buckets()) text += " [" + std::to_string(begin) + ", " + std::to_string(end) + ")";
  L.log.info(text);
}

// Forward/backward (real or simulated) with the gradient buckets started as
// backward finishes each range; returns once every bucket has been started.
nn::StepStats compute_and_start(Loop& L, std::span<const std::int64_t> batch, GradientBuckets& buckets) {
  nn::Model& model = L.model;
  const bool via_host = staged(L);
  // "skip": a worker whose own loss is non-finite puts a NaN into the first
  // range it contributes, so the averaged gradients carry it and every worker
  // skips the step alike (the loss is known before the first range is ready).
  bool first_range = true;
  auto ready = [&](std::int64_t off, std::int64_t cnt) {
    if (via_host) {
      model.get_grads(off, std::span<float>(L.staging).subspan(static_cast<std::size_t>(off), static_cast<std::size_t>(cnt)));
    }
    if (first_range && L.simulated_grads.empty() && L.guard.skipping() && !std::isfinite(model.last_loss())) {
      const float nan = std::numeric_limits<float>::quiet_NaN();
      if (via_host) {
        L.staging[static_cast<std::size_t>(off)] = nan;
      } else {
        model.backend().copy_from_host(model.device_grads() + off, &nan, sizeof(float));
      }
    }
    first_range = false;
    buckets.ready(off, cnt);
  };
  nn::StepStats s;
  const WorkloadConfig& w = L.config.workload;
  if (!L.simulated_grads.empty()) {
    TraceSpan compute(L.trace, TraceLevel::kSteps, "forward+backward", "worker");
    s = simulated_step(model, 1e-3 * w.simulated_step_ms * (L.straggler.active() ? w.straggler_slowdown : 1.0), ready);
  } else {
    {
      TraceSpan data_span(L.trace, TraceLevel::kSteps, "data", "worker");
      L.data.train.gather(batch, L.images.data(), L.labels.data());
    }
    TraceSpan compute(L.trace, TraceLevel::kSteps, "forward+backward", "worker");
    s = model.train_step(L.images.data(), L.labels.data(), static_cast<int>(batch.size()), ready);
  }
  if (via_host) {  // ranges backward did not report, if any (the buckets started are in flight: not those)
    for (const auto& [begin, end] : buckets.unreported()) {
      model.get_grads(begin, std::span<float>(L.staging).subspan(static_cast<std::size_t>(begin), static_cast<std::size_t>(end - begin)));
    }
  }
  buckets.finish();
  return s;
}

// Returns the step's training loss (NaN under simulated compute).
double train_step(Loop& L, std::span<const std::int64_t> batch, std::int64_t step, int epoch, double lr) {
  nn::Model& model = L.model;
  const bool simulated = !L.simulated_grads.empty();
  if (simulated) {  // what a real backward would have written
    model.backend().copy_from_host(model.device_grads(), L.simulated_grads.data(), L.simulated_grads.size() * sizeof(float));
  }
  TraceSpan step_span(L.trace, TraceLevel::kSteps, "step", "worker");
  step_span.arg("step", step).arg("epoch", epoch).arg("images", static_cast<std::int64_t>(batch.size()));
  const auto t0 = Clock::now();
  const double injected_s = simulated ? 0.0 : L.straggler.delay();
  const auto n = static_cast<int>(batch.size());
  GradientBuckets buckets(*L.collective, staged(L) ? L.staging.data() : model.device_grads(), model.num_params(),
                          L.config.collective.bucket_bytes);
  const nn::StepStats s = compute_and_start(L, batch, buckets);
  const bool loss_bad = !simulated && !std::isfinite(s.loss);
  if (loss_bad && !L.guard.skipping()) {
    wait_collective(L);  // every worker's loss is its own: finish this step's collective before leaving it
    L.guard.seen(step, lr, describe_loss(s.loss));  // "stop": throws
  }
  const auto t1 = Clock::now();

  bool skipped = false;
  {
    TraceSpan wait_span(L.trace, TraceLevel::kSteps, "allreduce wait", "worker");
    wait_span.arg("buckets", buckets.buckets_started());
    wait_collective(L);
    // The averaged gradients are the same on every worker: all stop, or all
    // skip the step, together (checked where they are on the host; on a GPU
    // without staging, under "skip" they are copied to the host for it, under
    // "stop" the next loss and the final weights are checked instead).
    const auto num = static_cast<std::size_t>(model.num_params());
    const float* host_grads = staged(L) ? L.staging.data() : model.backend().is_cuda() ? nullptr : model.device_grads();
    if (host_grads == nullptr && L.guard.skipping()) {
      L.check_grads.resize(num);
      model.get_grads(L.check_grads);
      host_grads = L.check_grads.data();
    }
    if (host_grads != nullptr && !all_finite(std::span<const float>(host_grads, num))) {
      L.guard.seen(step, lr, loss_bad ? describe_loss(s.loss) : "non-finite averaged gradient");
      skipped = true;  // "skip": no update this step, on every worker
    }
    if (staged(L) && !skipped) {
      model.backend().copy_from_host(model.device_grads(), L.staging.data(), L.staging.size() * sizeof(float));
    }
  }
  const auto t2 = Clock::now();
  if (!skipped) {
    TraceSpan update_span(L.trace, TraceLevel::kSteps, "update", "worker");
    L.optimizer.step(model.device_params(), model.device_grads(), lr);
    model.backend().synchronize();
  }
  const auto t3 = Clock::now();
  log_buckets(L, buckets);

  L.last_compute_s = seconds_between(t0, t1);
  L.straggler.record(L.last_compute_s - injected_s);
  L.result.compute_s += L.last_compute_s;
  L.result.pull_s += seconds_between(t2, t3);
  L.result.push_s += seconds_between(t1, t2);
  L.result.images += n;
  write_step_record(L.metrics, StepRecord{step, epoch, n, simulated ? nullptr : &s, seconds_between(t0, t3),
                                          L.last_compute_s, seconds_between(t2, t3), seconds_between(t1, t2), lr, 0.0,
                                          skipped});
  L.guard.end_step(step, lr, skipped);  // throws after max_skipped_steps in a row
  L.result.skipped_steps = L.guard.skipped_steps();
  return simulated ? std::numeric_limits<double>::quiet_NaN() : s.loss;
}

// After a re-form: every replica takes the most advanced one's weights,
// optimizer state and progress (worker/collective/replica_resync.h), so the
// phases it completed are not repeated and the survivors' operations in the
// new collective stay in step. Returns the leader's worker rank.
int resync_replicas(Loop& L) {
  ReplicaState state;
  state.done = L.done;
  state.optimizer_steps = L.optimizer.steps_taken();
  state.params.resize(static_cast<std::size_t>(L.model.num_params()));
  L.model.get_params(state.params);
  state.optimizer_state = L.optimizer.state();
  const ResyncOutcome r = resync_from_leader(*L.collective, state, [&L](std::span<float> host, const std::function<void(float*)>& op) {
    on_collective_memory(L, host, op);
  });
  L.model.set_params(state.params);
  L.optimizer.set_state(state.optimizer_state, state.optimizer_steps);
  L.model.backend().synchronize();
  L.done = state.done;
  const int leader = L.live.at(static_cast<std::size_t>(r.leader));
  if (r.own_done != state.done) {
    L.log.warn("worker " + std::to_string(leader) + " had completed more of the job before the failure (phase " +
               std::to_string(state.done) + ", this worker " + std::to_string(r.own_done) +
               "): its updates are taken, not repeated");
  }
  return leader;
}

// After the collective failed with `why`: true once it has been re-formed
// among the workers the scheduler has not dropped (see allreduce_worker.h);
// false when it cannot be (no reform, or nobody was dropped in time).
bool reform_collective(Loop& L, const std::string& why) {
  if (L.reform == nullptr) return false;
  L.log.warn("the collective failed: " + why + "; waiting for the scheduler to drop the failed worker");
  const std::size_t before = static_cast<std::size_t>(L.collective->size());
  const auto limit = Clock::now() + std::chrono::milliseconds(L.config.cluster.heartbeat_timeout_ms) +
                     std::chrono::milliseconds(L.config.cluster.timeout_ms);
  for (;;) {
    for (const int r : L.session.scheduler().take_dropped()) std::erase(L.live, r);
    if (L.live.size() < before) break;
    if (Clock::now() >= limit) return false;
    if (L.session.scheduler().handle_incoming()) {
      throw AbortedError("the scheduler ended the job while worker " + std::to_string(L.session.rank()) +
                         " was re-forming the collective");
    }
    L.session.scheduler().check_scheduler_alive();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const auto me = std::find(L.live.begin(), L.live.end(), L.session.rank());
  if (me == L.live.end()) throw AbortedError("worker " + std::to_string(L.session.rank()) + " was dropped from the job");
  const int rank = static_cast<int>(me - L.live.begin());
  const int size = static_cast<int>(L.live.size());
  L.collective = nullptr;
  L.owned.reset();  // the failed one goes first (its communication thread with it)
  ++L.generation;
  L.owned = (*L.reform)(rank, size, L.generation);
  L.collective = L.owned.get();
  const int leader = resync_replicas(L);
  complete_missed_checkpoint(L);
  std::string ranks;
  for (const int r : L.live) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  L.log.warn("re-formed the collective without the dropped worker(s): " + std::to_string(size) + " workers (" + ranks +
             "), this one rank " + std::to_string(rank) + ", generation " + std::to_string(L.generation) +
             "; replicas took worker " + std::to_string(leader) + "'s weights and optimizer state (the most advanced)");
  return true;
}

}  // namespace

std::string allreduce_join_key(int rank, std::int64_t take) {
  return "allreduce/join/" + std::to_string(rank) + "/" + std::to_string(take);
}

// "generation step rank,rank,..." or "end" (the job ended before it could be taken in: live empty).
std::string format_join(const AllreduceJoin& join) {
  if (join.live.empty()) return "end";
  std::string text = std::to_string(join.generation) + " " + std::to_string(join.first_step) + " ";
  for (std::size_t i = 0; i < join.live.size(); ++i) {
    if (i > 0) text += ',';
    text += std::to_string(join.live[i]);
  }
  return text;
}

AllreduceJoin parse_join(const std::string& text) {
  AllreduceJoin join;
  if (text == "end") return join;
  const auto a = text.find(' ');
  const auto b = a == std::string::npos ? a : text.find(' ', a + 1);
  try {
    if (b == std::string::npos) throw std::invalid_argument("fields");
    join.generation = std::stoi(text.substr(0, a));
    join.first_step = std::stoll(text.substr(a + 1, b - a - 1));
    join.live = parse_members(text.substr(b + 1));
  } catch (const std::exception&) {
    throw ProtocolError("allreduce join: malformed value '" + text + "' (expected 'generation step ranks' or 'end')");
  }
  if (join.generation < 1 || join.first_step < 0) throw ProtocolError("allreduce join: bad value '" + text + "'");
  return join;
}

TrainResult run_allreduce_worker(const RunConfig& config, WorkerSession& session, Workload& workload,
                                 Collective& collective, MetricsWriter& metrics, Logger& log, TraceRecorder* trace,
                                 const WorkerCheckpoint* resume, const ReformCollective* reform,
                                 const AllreduceJoin* join) {
  if (config.mode != Mode::kAllreduce) {
    throw ConfigError("run_allreduce_worker: mode " + std::string(to_string(config.mode)) + " needs the servers");
  }
  if (join != nullptr) {
    const auto me = std::find(join->live.begin(), join->live.end(), session.rank());
    if (me == join->live.end() || collective.size() != static_cast<int>(join->live.size()) ||
        collective.rank() != static_cast<int>(me - join->live.begin())) {
      throw ConfigError("run_allreduce_worker: collective rank " + std::to_string(collective.rank()) + " of " +
                        std::to_string(collective.size()) + " does not match worker " + std::to_string(session.rank()) +
                        " joining workers " + format_members(join->live));
    }
  } else if (collective.size() != session.num_workers() || collective.rank() != session.rank()) {
    throw ConfigError("run_allreduce_worker: collective rank " + std::to_string(collective.rank()) + " of " +
                      std::to_string(collective.size()) + " does not match worker " + std::to_string(session.rank()) +
                      " of " + std::to_string(session.num_workers()));
  }
  const WorkloadConfig& w = config.workload;
  nn::Model& model = *workload.model;
  nn::DeviceOptimizer optimizer(config.optimizer, model.backend(), model.num_params());
  Loop L{config, session, model, workload.data, &collective, optimizer, metrics, log, {}, {}, {}, {}, 0.0,
         Straggler(session.rank() == w.straggler_rank, w.straggler_slowdown), false, {}, nullptr,
         NonFiniteGuard(w, session.rank()), {}, nullptr, nullptr, {}, 0};
  L.trace = trace;
  L.reform = reform;
  if (resume != nullptr) L.done = resumed_phase(resume->step);  // resumed after the checkpoint of step resume->step - 1
  for (int r = 0; r < session.num_workers(); ++r) L.live.push_back(r);
  if (join != nullptr) L.live = join->live, L.generation = join->generation;
  if (staged(L)) L.staging.resize(static_cast<std::size_t>(model.num_params()));
  if (w.simulated_step_ms > 0.0) L.simulated_grads = simulated_gradients(model.num_params());
  const data::Dataset& train = workload.data.train;
  L.images.resize(static_cast<std::size_t>(w.batch_size) * static_cast<std::size_t>(train.channels * train.height * train.width));
  L.labels.resize(static_cast<std::size_t>(w.batch_size));

  {
    TraceSpan span(trace, TraceLevel::kSteps, "initial weights", "worker");
    if (join != nullptr) {  // the survivors' resync at the epoch boundary they took this worker in
      const int leader = resync_replicas(L);
      log.info("rejoined the collective: " + std::to_string(collective.size()) + " workers (" +
               format_members(join->live) + "), generation " + std::to_string(join->generation) + ", from step " +
               std::to_string(join->first_step) + " with worker " + std::to_string(leader) + "'s weights");
      write_rejoin_record(metrics, join->first_step);
    } else if (resume != nullptr) {
      broadcast_resumed(L, *resume);
      const double time_s = L.result.time_s;
      L.result = resume->result;
      L.result.time_s = time_s;
    } else {
      broadcast_initial(L);  // worker 0's initial weights everywhere
    }
  }
  model.set_dropout_seed(w.seed * 1000003ULL + static_cast<std::uint64_t>(session.rank()));
  if (resume != nullptr) model.set_dropout_step(resume->dropout_step);

  EpochDriver driver(config, train, session.rank(), session.num_workers());
  // Each epoch's workers: the scheduler's answer (the survivors after a drop), the checkpoint's for epochs begun before it.
  EpochMembers members(EpochMembers::from_scheduler(session.scheduler(), config.cluster.timeout_ms),
                       resume != nullptr ? resume->epoch_members : std::vector<std::int64_t>{});
  L.members = &members;
  log.info("training " + std::to_string(driver.total_steps()) + " steps (" + std::to_string(driver.steps_per_epoch()) +
           " per epoch) in allreduce mode with " + std::to_string(session.num_workers()) + " workers over " +
           collective.name() + (staged(L) ? " (gradients through host memory)" : "") + "; " +
           std::to_string(model.num_params()) + " parameters, buckets of " +
           std::to_string(config.collective.bucket_bytes) + " bytes");
  const std::int64_t step = driver.run(
      log, metrics, L.result.images,
      [&](std::span<const std::int64_t> batch, std::int64_t s, int epoch, double lr) {
        // A step the collective failed in is repeated once it is re-formed,
        // unless the replica taken then had completed it (replica_resync.h).
        double loss = std::numeric_limits<double>::quiet_NaN();
        for (;;) {
          try {
            if (L.done < step_phase(s)) {
              loss = train_step(L, batch, s, epoch, lr);
              L.done = step_phase(s);
            }
            if (checkpoint_due(config, s + 1) && L.done < checkpoint_phase(s)) take_checkpoint(L, s + 1);
            return loss;
          } catch (const TransportError& e) {
            if (!reform_collective(L, e.what())) throw;
          } catch (const TimeoutError& e) {
            if (!reform_collective(L, e.what())) throw;
          }
        }
      },
      [&](std::int64_t s, int epoch, bool last) {
        for (;;) {
          try {
            if (L.done < epoch_check_phase(s)) {
              const std::map<int, std::int64_t> joiners = check_replicas(L, ("after epoch " + std::to_string(epoch)).c_str());
              L.done = epoch_check_phase(s);
              if (!joiners.empty() && !last) grow_collective(L, joiners, s);
            }
            break;
          } catch (const TransportError& e) {
            if (!reform_collective(L, e.what())) throw;
          } catch (const TimeoutError& e) {
            if (!reform_collective(L, e.what())) throw;
          }
        }
        const bool joined_here = join != nullptr && s == join->first_step;  // evaluated by the others
        if (leads(L) && !last && !joined_here) evaluate_and_record(L, s, epoch, L.metrics.elapsed_s());
      },
      join != nullptr ? join->first_step : resume != nullptr ? resume->step : 0, &members);
  L.result.steps = step;
  L.result.time_s = metrics.elapsed_s();
  if (leads(L) && grows(L)) {  // rejoined workers the job ended before taking in: they end too
    for (const auto& r : session.scheduler().take_rejoined()) L.rejoined[r.rank] = std::max(L.rejoined[r.rank], r.take);
    for (const auto& [rank, take] : L.rejoined) session.scheduler().store_set(allreduce_join_key(rank, take), "end");
  }
  if (leads(L)) {
    evaluate_and_record(L, step, driver.epoch_after(step), L.result.time_s);
    std::vector<float> params(static_cast<std::size_t>(model.num_params()));
    model.get_params(params);
    write_final_weights(config.output.run_dir, model.layout(), params);
  }
  write_end_record(metrics, L.result);
  return L.result;
}

}  // namespace pstrain
