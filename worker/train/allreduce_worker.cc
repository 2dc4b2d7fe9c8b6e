#include "worker/train/allreduce_worker.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "common/base/errors.h"
#include "common/checkpoint/checkpoint_members.h"
#include "common/node/retry.h"
#include "worker/collective/gradient_buckets.h"
#include "worker/collective/replica_resync.h"
#include "worker/nn/device_buffer.h"
#include "worker/nn/device_optimizer.h"
#include "worker/train/allreduce_loop.h"
#include "worker/train/checkpoint.h"
#include "worker/train/divergence.h"
#include "worker/train/epoch_driver.h"
#include "worker/train/epoch_members.h"
#include "worker/train/ps_join.h"
#include "worker/train/ps_rejoin.h"
#include "worker/train/simulated_compute.h"
#include "worker/train/straggler.h"

namespace pstrain {

using namespace allreduce_detail;

namespace allreduce_detail {

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
// messages meanwhile so an abort of the job reaches this worker promptly
// (and a membership change is answered: allreduce_elastic.cc).
// A peer the scheduler dropped meanwhile ends the wait at once (when the
// collective may be re-formed), not at the collective's timeout. A scheduler
// silent for heartbeat_timeout_ms ends it too (check_scheduler_alive): a
// peer may be held elsewhere (asking the stopped scheduler for an epoch's
// members), and this worker would otherwise wait out the collective's
// timeout, or fail only when that peer exits, naming the closed connection
// instead of the scheduler (sweep_scheduler_test.cc, stop-allreduce-4w).
void wait_collective(Loop& L) {
  while (!L.collective->wait_all(std::chrono::milliseconds(200))) {
    if (L.session.scheduler().handle_incoming()) {
      throw AbortedError("the scheduler ended the job while worker " + std::to_string(L.session.rank()) +
                         " was training");
    }
    answer_changes(L, true);  // a peer may wait for a membership decision that needs this worker's answer
    check_dropped(L);
    L.session.scheduler().check_scheduler_alive();
  }
}

// Under "abort" (no re-form): before this worker fails with its collective's
// error, the scheduler gets its say on why the collective failed, for at
// most heartbeat_timeout_ms and a second (a peer that failed reports it, or
// the launcher's exit record or the peer's silence tells the scheduler,
// which then aborts the job: AbortedError naming that peer), or its own
// silence is named (TransportError, check_scheduler_alive). Without it a
// worker whose peer had exited naming the stopped scheduler could exit
// first, naming only the closed connection, and be taken for the cause.
void hear_scheduler_out(Loop& L, const std::string& why) {
  const int wait_ms = L.config.cluster.heartbeat_timeout_ms + 1000;
  RetryOptions poll;
  poll.interval = std::chrono::milliseconds(50);
  poll.watch = watch_scheduler(L.session.scheduler(),
                               "worker " + std::to_string(L.session.rank()) + "'s collective had failed");
  poll.watch();  // its word may be here already (or `why` was its silence, named by wait_collective)
  L.log.warn("the collective failed: " + why + "; waiting up to " + std::to_string(wait_ms) +
             " ms for the scheduler's word on the failed worker");
  retry_until(RetryClock::now() + std::chrono::milliseconds(wait_ms), "", nullptr,
              []() -> std::optional<bool> { return std::nullopt; }, poll);
}

bool recover_collective(Loop& L, const std::string& why) {
  if (L.reforms_on_failure) return reform_collective(L, why);
  hear_scheduler_out(L, why);
  return false;
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
             complete_checkpoint(L.config, steps_done, L.model.num_params(), 0, {}, nullptr, /*record_members=*/true));
}

}  // namespace allreduce_detail

namespace {

using Clock = std::chrono::steady_clock;
double seconds_between(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

void broadcast_initial(Loop& L) {
  std::vector<float> params(static_cast<std::size_t>(L.model.num_params()));
  L.model.get_params(params);
  on_collective_memory(L, params, [&](float* data) { L.collective->broadcast(data, params.size(), 0); });
  L.model.set_params(params);
}

// Resume: the saved model and optimizer state to every replica from the
// lowest member (collective rank 0: worker 0, or the checkpoint's lowest
// member in an elastic job), which read them from the part that holds them
// (that of the worker that led when the checkpoint was taken:
// read_worker_part); the others' own parts hold only their position and
// optimizer step count.
void broadcast_resumed(Loop& L, const WorkerCheckpoint& resume) {
  std::vector<float> params(static_cast<std::size_t>(L.model.num_params()));
  std::vector<float> state = L.optimizer.state();
  if (leads(L)) {
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
  // Cut at the checkpoint's step (EpochMembers::history_before, as the PS workers' parts): a change
  // decided for that step or later is not in the checkpoint; every part then holds the same history,
  // and the manifest's members (its last segment's that wrote a part) are the collective's at that step.
  if (L.members != nullptr) {
    const EpochDriver::NextStep& at = L.driver->next_step();
    c.epoch_members = at.end ? L.members->history() : L.members->history_before(at.epoch, at.step);
  }
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
  if (leads(L)) {
    L.log.info(complete_checkpoint(L.config, steps_done, L.model.num_params(), 0, {}, nullptr, /*record_members=*/true));
  }
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

// Step s, and the checkpoint after it when one is due; returns the step's
// loss (NaN under simulated compute, or when the replica taken after a
// re-form had completed the step).
double run_step(Loop& L, std::span<const std::int64_t> batch, std::int64_t s, int epoch, double lr) {
  double loss = std::numeric_limits<double>::quiet_NaN();
  in_collective(L, [&] {
    if (L.done < step_phase(s)) {
      loss = train_step(L, batch, s, epoch, lr);
      L.done = step_phase(s);
    }
    if (checkpoint_due(L.config, s + 1) && L.done < checkpoint_phase(s)) take_checkpoint(L, s + 1);
  });
  return loss;
}

// The end of an epoch after s steps: the replica check (and under "restart"
// the rejoined workers taken in), then the leader's evaluation.
void end_epoch(Loop& L, std::int64_t s, int epoch, bool last, const AllreduceJoin* join) {
  in_collective(L, [&] {
    if (L.done >= epoch_check_phase(s)) return;
    const std::map<int, std::int64_t> joiners = check_replicas(L, ("after epoch " + std::to_string(epoch)).c_str());
    L.done = epoch_check_phase(s);
    if (!joiners.empty() && !last) grow_collective(L, joiners, s);
  });
  const bool joined_here = join != nullptr && s == join->first_step;  // evaluated by the others
  if (leads(L) && !last && !joined_here) evaluate_and_record(L, s, epoch, L.metrics.elapsed_s());
}

// The workers of the collective this worker starts in: a joiner's or
// rejoiner's `join`, else `members` (a resume's), else 0..workers-1.
std::vector<int> starting_workers(const WorkerSession& session, const AllreduceJoin* join, const std::vector<int>* members) {
  if (join != nullptr) return join->live;
  if (members != nullptr) return *members;
  std::vector<int> live;
  for (int r = 0; r < session.num_workers(); ++r) live.push_back(r);
  return live;
}

// Throws ConfigError unless `collective` is this worker's place among
// `live`, the workers it starts with (0..workers-1; the checkpoint's members
// on a resume of an elastic job; rejoining or joining, the members' grown
// collective).
void check_collective(const WorkerSession& session, const Collective& collective, const std::vector<int>& live) {
  const auto me = std::find(live.begin(), live.end(), session.rank());
  if (me == live.end() || collective.size() != static_cast<int>(live.size()) ||
      collective.rank() != static_cast<int>(me - live.begin())) {
    throw ConfigError("run_allreduce_worker: collective rank " + std::to_string(collective.rank()) + " of " +
                      std::to_string(collective.size()) + " does not match worker " + std::to_string(session.rank()) +
                      " among workers " + format_members(live));
  }
}

// The replicas' first weights: the survivors' resync for a rejoined worker,
// worker 0's saved ones on a resume, else worker 0's initial ones.
void start_replicas(Loop& L, const WorkerCheckpoint* resume, const AllreduceJoin* join) {
  TraceSpan span(L.trace, TraceLevel::kSteps, "initial weights", "worker");
  if (join != nullptr) {  // the members' resync at the boundary they took this worker in
    int leader = 0;
    try {
      leader = resync_replicas(L);
    } catch (const TransportError& e) {  // a member lost in it: re-formed without it, as the others do
      if (!reform_collective(L, e.what())) throw;
      leader = L.live.front();
    } catch (const TimeoutError& e) {
      if (!reform_collective(L, e.what())) throw;
      leader = L.live.front();
    }
    L.log.info(std::string(join->start ? "joined" : "rejoined") + " the collective: " +
               std::to_string(L.collective->size()) + " workers (" + format_members(L.live) + "), generation " +
               std::to_string(L.generation) + ", from step " + std::to_string(join->first_step) + " with worker " +
               std::to_string(leader) + "'s weights and optimizer state");
    if (join->start) {
      write_join_record(L.metrics, *join->start);
    } else {
      write_rejoin_record(L.metrics, join->first_step);
    }
  } else if (resume != nullptr) {
    broadcast_resumed(L, *resume);
    const double time_s = L.result.time_s;
    L.result = resume->result;
    L.result.time_s = time_s;
  } else {
    broadcast_initial(L);  // worker 0's initial weights everywhere
  }
}

// After the last step: rejoined workers the job ended before taking in are
// told so ("end"), the leader evaluates and writes the final weights.
void finish_training(Loop& L, std::int64_t step, const EpochDriver& driver) {
  L.result.steps = step;
  L.result.time_s = L.metrics.elapsed_s();
  SchedulerClient& scheduler = L.session.scheduler();
  if (leads(L) && grows(L)) {
    for (const auto& r : scheduler.take_rejoined()) L.rejoined[r.rank] = std::max(L.rejoined[r.rank], r.take);
    for (const auto& [rank, take] : L.rejoined) scheduler.store_set(allreduce_join_key(rank, take), "end");
  }
  if (leads(L)) {
    evaluate_and_record(L, step, driver.epoch_after(step), L.result.time_s);
    std::vector<float> params(static_cast<std::size_t>(L.model.num_params()));
    L.model.get_params(params);
    write_final_weights(L.config.output.run_dir, L.model.layout(), params);
  }
  write_end_record(L.metrics, L.result);
}

// A membership change left this worker out from step `step` on: it ran
// every step before with the others (their allreduces are complete), so it
// leaves the collective, tells the scheduler it retired and ends.
void retire(Loop& L, std::int64_t step) {
  L.collective = nullptr;
  L.owned.reset();
  L.session.scheduler().finish(/*retired=*/true);
  L.result.steps = step;
  L.result.time_s = L.metrics.elapsed_s();
  L.result.retired = true;
  write_end_record(L.metrics, L.result);
}

}  // namespace

TrainResult run_allreduce_worker(const RunConfig& config, WorkerSession& session, Workload& workload,
                                 Collective& collective, MetricsWriter& metrics, Logger& log, TraceRecorder* trace,
                                 const WorkerCheckpoint* resume, const ReformCollective* reform,
                                 const AllreduceJoin* join, const std::vector<int>* members_at_start) {
  if (config.mode != Mode::kAllreduce) {
    throw ConfigError("run_allreduce_worker: mode " + std::string(to_string(config.mode)) + " needs the servers");
  }
  std::vector<int> live = starting_workers(session, join, members_at_start);
  check_collective(session, collective, live);
  const WorkloadConfig& w = config.workload;
  nn::Model& model = *workload.model;
  nn::DeviceOptimizer optimizer(config.optimizer, model.backend(), model.num_params());
  Loop L{config, session, model, workload.data, &collective, optimizer, metrics, log, {}, {}, {}, {}, 0.0,
         Straggler(session.rank() == w.straggler_rank, w.straggler_slowdown), false, {}, nullptr,
         NonFiniteGuard(w, session.rank()), {}, nullptr, nullptr, {}, 0};
  L.trace = trace;
  L.reform = reform;
  L.reforms_on_failure = reform != nullptr && drops_failed_workers(config.cluster.on_worker_failure);
  if (resume != nullptr) L.done = resumed_phase(resume->step);  // resumed after the checkpoint of step resume->step - 1
  L.live = std::move(live);
  if (join != nullptr) {
    L.generation = join->generation;
    L.dropped.insert(join->dropped.begin(), join->dropped.end());
  }
  L.forming = L.live.size();
  L.formation = join != nullptr;  // its first resync, with the members that took it in, is still ahead
  if (staged(L)) L.staging.resize(static_cast<std::size_t>(model.num_params()));
  if (w.simulated_step_ms > 0.0) L.simulated_grads = simulated_gradients(model.num_params());
  const data::Dataset& train = workload.data.train;
  L.images.resize(static_cast<std::size_t>(w.batch_size) * static_cast<std::size_t>(train.channels * train.height * train.width));
  L.labels.resize(static_cast<std::size_t>(w.batch_size));

  start_replicas(L, resume, join);
  model.set_dropout_seed(w.seed * 1000003ULL + static_cast<std::uint64_t>(session.rank()));
  if (resume != nullptr) model.set_dropout_step(resume->dropout_step);

  EpochDriver driver(config, train, session.rank(), session.num_workers());
  // Each epoch's workers: the scheduler's answer (the survivors after a drop), the checkpoint's for epochs begun before it.
  EpochMembers members(EpochMembers::from_scheduler(session.scheduler(), config.cluster.timeout_ms),
                       resume != nullptr ? resume->epoch_members : std::vector<std::int64_t>{});
  if (join != nullptr && join->start) {  // --join: every change's segments up to its own
    learn_join_segments(session.scheduler(), *join->start, members, config.cluster.timeout_ms);
    L.changes_known = join->start->change;
  } else if (join != nullptr && join->changes > 0) {  // --rejoin in an elastic job: the changes decided so far
    learn_join_segments(session.scheduler(), JoinStart{join->changes}, members, config.cluster.timeout_ms);
    L.changes_known = join->changes;
  } else if (resume != nullptr) {  // the resumed history's changes, numbered 1..n in the store (seed_resumed_history)
    L.changes_known = history_changes(resume->epoch_members);
  }
  L.members = &members;
  log.info("training " + std::to_string(driver.total_steps()) + " steps (" + std::to_string(driver.steps_per_epoch()) +
           " per epoch) in allreduce mode with " + std::to_string(L.live.size()) + " workers over " +
           collective.name() + (staged(L) ? " (gradients through host memory)" : "") + "; " +
           std::to_string(model.num_params()) + " parameters, buckets of " +
           std::to_string(config.collective.bucket_bytes) + " bytes");
  const std::int64_t step = driver.run(
      log, metrics, L.result.images,
      [&](std::span<const std::int64_t> batch, std::int64_t s, int epoch, double lr) {
        L.driver = &driver;  // from the first step on, next_step() answers a membership change
        const double loss = run_step(L, batch, s, epoch, lr);
        settle_changes(L);
        // A step that waited on nothing checked nothing: a scheduler silent past the timeout
        // (its heartbeats drained just above) ends training here, not at the next wait for it.
        session.scheduler().check_scheduler_alive();
        return loss;
      },
      [&](std::int64_t s, int epoch, bool last) { end_epoch(L, s, epoch, last, join); },
      join != nullptr ? join->first_step : resume != nullptr ? resume->step : 0, &members);
  if (driver.retired()) {
    retire(L, step);
    return L.result;
  }
  finish_training(L, step, driver);
  return L.result;
}

}  // namespace pstrain
