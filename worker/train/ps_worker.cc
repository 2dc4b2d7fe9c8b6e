#include "worker/train/ps_worker.h"

#include <algorithm>
#include <cmath>
#include <chrono>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "common/base/errors.h"
#include "common/wire/barrier_names.h"
#include "worker/train/checkpoint.h"
#include "worker/train/divergence.h"
#include "worker/train/epoch_driver.h"
#include "worker/train/epoch_members.h"
#include "worker/train/membership_answer.h"
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
  MetricsWriter& metrics;
  Logger& log;
  std::vector<float> params, images;
  // The flat gradients, in memory from the transport (shm: an arena the
  // co-located servers read pushes from in place); pushed zero-copy, so
  // written only between one step's push wait and the next step's pushes.
  SendFloats grads;
  std::vector<std::int32_t> labels;
  TrainResult result;
  double last_compute_s = 0.0;
  Straggler straggler;
  std::optional<KVClient::Ticket> prefetch;  // pull of the next step's weights, already sent
  bool simulated = false;                    // simulated compute: grads hold simulated_gradients()
  TraceRecorder* trace = nullptr;
  NonFiniteGuard guard;
  // This step: whether the loss was checked, and whether it is skipped (a
  // non-finite loss or gradient under on_nonfinite "skip": the chunks not
  // yet sent go as skip pushes).
  bool loss_checked = false;
  bool skipping_step = false;
  EpochMembers* members = nullptr;  // each epoch's workers (recorded in checkpoints)
};

// The weights for `step`: waits for the pull sent at the end of the previous
// step (or sends one now). The servers answer when their consistency policy
// allows (sync: the step's update applied; ssp: within the bound); the time
// the pull was held there counts as blocked.
void pull_weights(Loop& L, std::int64_t step) {
  TraceSpan span(L.trace, TraceLevel::kSteps, "pull wait", "worker");
  span.arg("step", step).arg("prefetched", L.prefetch ? 1 : 0);
  KVClient& kv = L.session.kv();
  const KVClient::Ticket t = L.prefetch ? *L.prefetch : kv.pull(L.params, step);
  L.prefetch.reset();
  L.result.blocked_s += 1e-6 * static_cast<double>(kv.wait(t).max_parked_us);
  L.model.set_params(L.params);
}

// Checks the step's loss (known before the first gradients are ready) and
// the gradients of [offset, offset + count): nothing non-finite leaves this
// worker (the servers' own check is for bad peers). On the first non-finite
// value: "stop" throws, "skip" marks the step skipped.
void check_range(Loop& L, std::span<const float> grads, std::int64_t step, double lr) {
  if (L.simulated || L.skipping_step) return;
  if (!L.loss_checked) {
    L.loss_checked = true;
    const double loss = L.model.last_loss();
    if (!std::isfinite(loss)) {
      L.guard.seen(step, lr, describe_loss(loss));
      L.skipping_step = true;
      return;
    }
  }
  if (!all_finite(grads)) {
    L.guard.seen(step, lr, "non-finite gradient");
    L.skipping_step = true;
  }
}

// Pushes every chunk lying in [offset, offset + count) of the gradients not
// pushed yet, each copied from the model and checked just before (so the
// final "anything not yet sent" call costs nothing when backward reported
// every chunk). Once the step is skipped they go as skip pushes (chunks
// already sent stay sent).
void push_range(Loop& L, std::int64_t offset, std::int64_t count, std::int64_t step, double lr,
                std::vector<KVClient::Ticket>& tickets, std::vector<bool>& pushed) {
  const ShardMap& map = L.session.shard_map();
  std::vector<std::int64_t> keys = map.chunks_within(offset, offset + count);
  std::erase_if(keys, [&](std::int64_t k) { return pushed[static_cast<std::size_t>(k)]; });
  for (auto k : keys) pushed[static_cast<std::size_t>(k)] = true;
  if (keys.empty()) return;
  for (std::size_t i = 0; i < keys.size() && !L.simulated && !L.skipping_step; ++i) {
    const Chunk& c = map.chunk(keys[i]);
    const auto span = L.grads.values.subspan(static_cast<std::size_t>(c.offset), static_cast<std::size_t>(c.num_elems));
    L.model.get_grads(c.offset, span);
    check_range(L, span, step, lr);
  }
  TraceSpan span(L.trace, TraceLevel::kAll, L.skipping_step ? "skip push send" : "push send", "worker");
  span.arg("first_chunk", keys.front()).arg("chunks", static_cast<std::int64_t>(keys.size()));
  // The frames hold the gradients' owner: an abort that unwinds past this step frees nothing they read.
  tickets.push_back(L.skipping_step ? L.session.kv().push_skip(step, keys)
                                    : L.session.kv().push(L.grads.values, step, lr, keys, L.grads.owner));
}

// time_s: when training reached these weights (the record's time axis).
void evaluate_and_record(Loop& L, std::int64_t step, int epoch, double time_s) {
  if (L.simulated) return;  // no test set under simulated compute
  TraceSpan span(L.trace, TraceLevel::kSteps, "eval", "worker");
  span.arg("step", step).arg("epoch", epoch);
  pull_weights(L, step);
  const EvalResult r = evaluate(L.model, L.data.test);
  L.result.final_test_accuracy = r.accuracy;
  write_eval_record(L.metrics, L.log, step, epoch, r, time_s);
}

// Returns the step's training loss (NaN under simulated compute).
double train_step(Loop& L, std::span<const std::int64_t> batch, std::int64_t step, int epoch, double lr) {
  KVClient& kv = L.session.kv();
  TraceSpan step_span(L.trace, TraceLevel::kSteps, "step", "worker");
  step_span.arg("step", step).arg("epoch", epoch).arg("images", static_cast<std::int64_t>(batch.size()));
  const auto t0 = Clock::now();
  pull_weights(L, step);
  const auto t1 = Clock::now();
  L.loss_checked = false;
  L.skipping_step = false;

  const WorkloadConfig& w = L.config.workload;
  const double injected_s = L.simulated ? 0.0 : L.straggler.delay();
  const auto n = static_cast<int>(batch.size());
  std::vector<KVClient::Ticket> tickets;
  std::vector<bool> pushed(L.session.shard_map().chunks().size(), false);
  auto ready = [&](std::int64_t off, std::int64_t cnt) { push_range(L, off, cnt, step, lr, tickets, pushed); };
  nn::StepStats s;
  if (!L.simulated) {
    TraceSpan data_span(L.trace, TraceLevel::kSteps, "data", "worker");
    L.data.train.gather(batch, L.images.data(), L.labels.data());
  }
  {
    TraceSpan compute(L.trace, TraceLevel::kSteps, "forward+backward", "worker");
    if (L.simulated) {
      s = simulated_step(L.model, 1e-3 * w.simulated_step_ms * (L.straggler.active() ? w.straggler_slowdown : 1.0),
                         ready);
    } else {
      s = L.model.train_step(L.images.data(), L.labels.data(), n, ready);
    }
  }
  push_range(L, 0, L.session.shard_map().total_elems(), step, lr, tickets, pushed);  // anything not yet sent
  // The next step's weights are requested now: the servers answer as soon as
  // the policy allows (sync: this step's update applied), without another
  // round trip.
  L.prefetch = kv.pull(L.params, step + 1);
  const auto t2 = Clock::now();

  double staleness = 0.0;
  {
    TraceSpan wait_span(L.trace, TraceLevel::kSteps, "push wait", "worker");
    wait_span.arg("requests", static_cast<std::int64_t>(tickets.size()));
    for (auto t : tickets) staleness = std::max(staleness, kv.wait(t).mean_staleness);
  }
  const auto t3 = Clock::now();

  L.last_compute_s = seconds_between(t1, t2);
  L.straggler.record(L.last_compute_s - injected_s);
  L.result.compute_s += L.last_compute_s;
  L.result.pull_s += seconds_between(t0, t1);
  L.result.push_s += seconds_between(t2, t3);
  L.result.images += n;
  write_step_record(L.metrics, StepRecord{step, epoch, n, L.simulated ? nullptr : &s, seconds_between(t0, t3),
                                          L.last_compute_s, seconds_between(t0, t1), seconds_between(t2, t3), lr,
                                          staleness, L.skipping_step});
  L.guard.end_step(step, lr, L.skipping_step);  // throws after max_skipped_steps in a row
  L.result.skipped_steps = L.guard.skipped_steps();
  return L.simulated ? std::numeric_limits<double>::quiet_NaN() : s.loss;
}

// A checkpoint after `steps_done` steps (worker/train/worker_checkpoint.h):
// this worker's part, the barrier (every push of the steps before is then
// applied and every server's part written), then the lowest live worker the
// manifest.
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
  SchedulerClient& scheduler = L.session.scheduler();
  const std::int64_t server_failures = scheduler.server_failures();
  write_worker_part(L.config, L.session.rank(), c);
  scheduler.barrier("checkpoint " + std::to_string(steps_done));
  finish_ps_checkpoint(scheduler, L.session.rank(), L.config, steps_done, L.model.num_params(), L.session.num_servers(),
                       server_failures, L.log);
}

// Completes the last prefetch (its weights are not needed).
void kv_wait_quietly(Loop& L) {
  L.session.kv().wait(*L.prefetch);
  L.prefetch.reset();
}

// A membership change left this worker out from step `step` on: every push
// of its steps before is in (train_step waited for each), so it tells the
// scheduler it retired (the servers then stop waiting for it) and ends. The
// prefetched pull of `step` is left unanswered: in sync it completes only
// once the servers know.
TrainResult retire(Loop& L, std::int64_t step) {
  L.session.scheduler().finish(/*retired=*/true);
  L.prefetch.reset();
  L.result.steps = step;
  L.result.time_s = L.metrics.elapsed_s();
  L.result.retired = true;
  write_end_record(L.metrics, L.result);
  return L.result;
}

}  // namespace


TrainResult run_ps_worker(const RunConfig& config, WorkerSession& session, Workload& workload, MetricsWriter& metrics,
                          Logger& log, TraceRecorder* trace, const WorkerCheckpoint* resume, bool rejoin) {
  if (config.mode == Mode::kAllreduce) throw ConfigError("run_ps_worker: mode allreduce has no servers");
  const WorkloadConfig& w = config.workload;
  nn::Model& model = *workload.model;
  const auto num_params = static_cast<std::size_t>(model.num_params());
  Loop L{config, session, model, workload.data, metrics, log, std::vector<float>(num_params), {},
         session.scheduler().transport().allocate_send_floats(num_params), {}, {}, 0.0,
         Straggler(session.rank() == w.straggler_rank, w.straggler_slowdown), std::nullopt, w.simulated_step_ms > 0.0,
         nullptr, NonFiniteGuard(w, session.rank())};
  L.trace = trace;
  if (L.simulated) {
    const std::vector<float> simulated = simulated_gradients(model.num_params());
    std::copy(simulated.begin(), simulated.end(), L.grads.values.begin());
  }
  const data::Dataset& train = workload.data.train;
  L.images.resize(static_cast<std::size_t>(w.batch_size) * static_cast<std::size_t>(train.channels * train.height * train.width));
  L.labels.resize(static_cast<std::size_t>(w.batch_size));

  model.get_params(L.params);
  std::int64_t start_step = resume != nullptr ? resume->step : 0;
  if (rejoin) {  // the servers hold the job's current weights: pull them, join at their step
    TraceSpan span(trace, TraceLevel::kSteps, "rejoin", "worker");
    start_step = rejoin_ps_job(session, L.params, config.cluster, log);
    write_rejoin_record(metrics, start_step);
    pass_rejoin_checkpoint(session, config, start_step, model.num_params(), log);  // joined at a checkpoint step: the others' barrier
  } else if (resume != nullptr) {  // the servers hold the checkpoint's weights: pull them
    TraceSpan span(trace, TraceLevel::kSteps, "initial weights", "worker");
    session.kv().wait(session.kv().pull(L.params, resume->step));
    session.scheduler().barrier("initial weights");
    const double time_s = L.result.time_s;
    L.result = resume->result;
    L.result.time_s = time_s;
  } else {
    TraceSpan span(trace, TraceLevel::kSteps, "initial weights", "worker");
    session.broadcast_initial(L.params);  // worker 0's initial weights everywhere
  }
  model.set_params(L.params);
  model.set_dropout_seed(w.seed * 1000003ULL + static_cast<std::uint64_t>(session.rank()));
  if (resume != nullptr) model.set_dropout_step(resume->dropout_step);

  EpochDriver driver(config, train, session.rank(), session.num_workers());
  // Each epoch's workers: the scheduler's answer (the survivors after a drop), the checkpoint's for epochs begun before it.
  EpochMembers members(EpochMembers::from_scheduler(session.scheduler(), config.cluster.timeout_ms),
                       resume != nullptr ? resume->epoch_members : std::vector<std::int64_t>{});
  L.members = &members;
  log.info("training " + std::to_string(driver.total_steps()) + " steps (" + std::to_string(driver.steps_per_epoch()) +
           " per epoch) in " + std::string(to_string(config.mode)) + " mode with " +
           std::to_string(session.num_workers()) + " workers, " + std::to_string(session.num_servers()) +
           " servers; " + session.shard_map().summary());
  const std::int64_t step = driver.run(
      log, metrics, L.result.images,
      [&](std::span<const std::int64_t> batch, std::int64_t s, int epoch, double lr) {
        const double loss = train_step(L, batch, s, epoch, lr);
        if (checkpoint_due(config, s + 1)) take_checkpoint(L, s + 1);
        answer_membership_changes(session.scheduler(), session.rank(), driver.next_step(), members,
                                  config.cluster.timeout_ms, log);
        return loss;
      },
      [&](std::int64_t s, int epoch, bool last) {
        if (session.rank() == 0 && !last) evaluate_and_record(L, s, epoch, L.metrics.elapsed_s());
      },
      start_step, &members);
  if (driver.retired()) return retire(L, step);
  {
    TraceSpan span(trace, TraceLevel::kSteps, "final barrier", "worker");
    if (L.prefetch) kv_wait_quietly(L);
    session.scheduler().barrier(std::string(kFinalBarrier));  // every push of every worker has been applied
  }
  L.result.steps = step;
  L.result.time_s = metrics.elapsed_s();
  if (session.rank() == 0) evaluate_and_record(L, step, driver.epoch_after(step), L.result.time_s);
  if (session.rank() == 0) write_final_weights(config.output.run_dir, L.model.layout(), L.params);  // the final pull's weights
  write_end_record(metrics, L.result);
  return L.result;
}

}  // namespace pstrain
