#include "worker/train/ps_worker.h"

#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>

#include "common/base/bfloat16.h"
#include "common/base/errors.h"
#include "common/wire/barrier_names.h"
#include "worker/client/copy_pipeline.h"
#include "worker/client/host_copy_engine.h"
#ifdef PSTRAIN_HAVE_CUDA
#include "worker/nn/cuda/copy_stream.h"
#endif
#include "worker/train/checkpoint.h"
#include "worker/train/divergence.h"
#include "worker/train/epoch_driver.h"
#include "worker/train/epoch_members.h"
#include "worker/train/membership_answer.h"
#include "worker/train/ps_join.h"
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
  // written (by the copy pipeline's downloads) only between one step's push
  // wait and the next step's backward.
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
  // Gradients out and weights in (worker/client/copy_pipeline.h). While a
  // step's jobs run, the KV client, `tickets`, `pull_parked_us`, `guard`
  // and the two flags above belong to the communication thread.
  std::unique_ptr<nn::CopyEngine> engine{};
  std::unique_ptr<CopyPipeline> pipeline{};
  std::vector<KVClient::Ticket> tickets{};  // this step's pushes
  std::int64_t pull_parked_us = 0;        // the last pull: longest a chunk was held at its server
  // The float32 pulls' destination: on a host backend the model's own
  // parameters (a pulled chunk is written straight into what the forward
  // reads: no upload pass), else `params` (uploaded by the copy engine).
  std::span<float> weights{};
  // ps.wire_dtype = "bfloat16": pushes leave from wire_grads (the transport's
  // memory, `wire_grads_memory`), pulls land in wire_params; the copy engine
  // narrows and widens (worker/client/copy_pipeline.h).
  bool bfloat16 = false;
  SendFloats wire_grads_memory{};
  std::span<std::uint16_t> wire_grads{};
  std::vector<std::uint16_t> wire_params{};
};

bool weights_in_model(Loop& L) { return L.weights.data() == L.model.device_params(); }

// Chooses the buffers the pulls and pushes use (Loop::weights, the bfloat16 ones).
void choose_buffers(Loop& L) {
  const std::size_t n = L.params.size();
  L.weights = L.model.backend().is_cuda() ? std::span<float>(L.params) : std::span<float>(L.model.device_params(), n);
  L.bfloat16 = wire_dtype_of(L.config.ps.wire_dtype) == DType::kBFloat16;
  if (!L.bfloat16) return;
  L.wire_grads_memory = L.session.scheduler().transport().allocate_send_floats((n + 1) / 2);
  L.wire_grads = std::span<std::uint16_t>(reinterpret_cast<std::uint16_t*>(L.wire_grads_memory.values.data()), n);
  L.wire_params.resize(n);
  if (L.simulated) to_bfloat16(L.grads.values, L.wire_grads);  // fixed gradients: narrowed once
}

bool all_finite_bfloat16(std::span<const std::uint16_t> values) {
  for (const std::uint16_t v : values) {
    if ((v & 0x7f80u) == 0x7f80u) return false;  // exponent all ones: Inf or NaN
  }
  return true;
}

// However the loop ends: stops the communication thread (its running job
// finishes first), then clears the KV client's pull hook and gives the model
// back its default (both outlive the loop).
struct PipelineHooks {
  Loop& L;
  ~PipelineHooks() {
    L.pipeline.reset();
    L.session.kv().set_pull_arrival({});
    const PullPages& pages = L.session.kv().pull_pages();
    if (pages.taken() > 0) {
      L.log.info("pull replies mapped into the model instead of copied: " + std::to_string(pages.taken()) +
                 " (pages mapped anew: " + std::to_string(pages.maps()) + ")");
    }
    try {
      L.session.kv().map_pulls_into({});  // the model's weights private again, as they are
    } catch (const std::exception& e) {
      L.log.warn(std::string("the model's weights could not be made private again: ") + e.what());
    }
    L.model.set_sync_before_grads_ready(true);
  }
};

// The backend's copy engine: the CUDA copy stream, or the host copy thread.
std::unique_ptr<nn::CopyEngine> make_copy_engine(nn::Backend& backend, TraceRecorder* trace) {
#ifdef PSTRAIN_HAVE_CUDA
  if (backend.is_cuda()) return nn::cuda::make_cuda_copy_engine(backend, trace);
#endif
  (void)backend;
  return std::make_unique<HostCopyEngine>(trace);
}

// Sends the pull of `step`'s weights; each chunk is uploaded as it arrives.
KVClient::Ticket send_pull(Loop& L, std::int64_t step) {
  L.pipeline->begin_pull();
  if (L.bfloat16) return L.session.kv().pull_bfloat16(L.wire_params, step);
  return L.session.kv().pull(L.weights, step);
}

// The weights for `step` come in: the communication thread waits for the
// pull sent at the end of the previous step (or sent now) while the chunks
// are uploaded as they arrive; the forward waits for each layer's own
// (CopyPipeline::before_forward). The servers answer when their consistency
// policy allows (sync: the step's update applied; ssp: within the bound);
// the time the pull was held there counts as blocked.
void start_weights(Loop& L, std::int64_t step) {
  const bool prefetched = L.prefetch.has_value();
  const KVClient::Ticket t = prefetched ? *L.prefetch : send_pull(L, step);
  L.prefetch.reset();
  L.pipeline->submit([&L, t, step, prefetched] {
    TraceSpan span(L.trace, TraceLevel::kAll, "pull replies", "worker");
    span.arg("step", step).arg("prefetched", prefetched ? 1 : 0);
    L.pull_parked_us = L.session.kv().wait(t).max_parked_us;
    L.pipeline->pull_complete();
  });
}

// The weights for `step`: waits for the pull sent at the end of the previous
// step (or sends one now). The servers answer when their consistency policy
// allows (sync: the step's update applied; ssp: within the bound); the time
// the pull was held there counts as blocked.
void pull_weights(Loop& L, std::int64_t step) {
  TraceSpan span(L.trace, TraceLevel::kSteps, "pull wait", "worker");
  span.arg("step", step).arg("prefetched", L.prefetch ? 1 : 0);
  start_weights(L, step);
  L.pipeline->finish_pull();  // every chunk arrived and uploaded
  L.pipeline->wait_jobs();
  L.result.blocked_s += 1e-6 * static_cast<double>(L.pull_parked_us);
}

// Checks the step's loss (known before the first gradients are ready) and
// the gradients of a chunk as they will be sent (bfloat16 wire: narrowed):
// nothing non-finite leaves this worker (the servers' own check is for bad
// peers). On the first non-finite value: "stop" throws, "skip" marks the
// step skipped.
void check_range(Loop& L, const Chunk& c, std::int64_t step, double lr) {
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
  const auto offset = static_cast<std::size_t>(c.offset);
  const auto count = static_cast<std::size_t>(c.num_elems);
  if (L.bfloat16 ? !all_finite_bfloat16(L.wire_grads.subspan(offset, count))
                 : !all_finite(L.grads.values.subspan(offset, count))) {
    L.guard.seen(step, lr, "non-finite gradient");
    L.skipping_step = true;
  }
}

// On the communication thread, once the downloads of `keys` (this step's
// chunks newly within the gradient ranges backward reported) have
// completed: checks them and pushes them. Once the step is skipped they go
// as skip pushes (chunks already sent stay sent).
void push_chunks(Loop& L, const std::vector<std::int64_t>& keys, std::int64_t step, double lr) {
  const ShardMap& map = L.session.shard_map();
  for (std::size_t i = 0; i < keys.size() && !L.simulated && !L.skipping_step; ++i) {
    check_range(L, map.chunk(keys[i]), step, lr);
  }
  TraceSpan span(L.trace, TraceLevel::kAll, L.skipping_step ? "skip push send" : "push send", "worker");
  span.arg("first_chunk", keys.front()).arg("chunks", static_cast<std::int64_t>(keys.size()));
  // The frames hold the gradients' owner: an abort that unwinds past this step frees nothing they read.
  KVClient& kv = L.session.kv();
  L.tickets.push_back(L.skipping_step ? kv.push_skip(step, keys)
                      : L.bfloat16    ? kv.push_bfloat16(L.wire_grads, step, lr, keys, L.wire_grads_memory.owner)
                                      : kv.push(L.grads.values, step, lr, keys, L.grads.owner));
}

// Training thread: [offset, offset + count) of the gradients is final on the
// backend: its chunks are downloaded, then pushed by push_chunks.
void grads_ready(Loop& L, std::int64_t offset, std::int64_t count, std::int64_t step, double lr) {
  L.pipeline->grads_ready(offset, count,
                          [&L, step, lr](const std::vector<std::int64_t>& keys) { push_chunks(L, keys, step, lr); });
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

// Forward and backward (or the simulated step): each layer's forward waits
// for its own weights, each layer's gradients leave as backward finishes it.
nn::StepStats compute_step(Loop& L, std::span<const std::int64_t> batch, std::int64_t step, double lr) {
  TraceSpan compute(L.trace, TraceLevel::kSteps, "forward+backward", "worker");
  auto ready = [&](std::int64_t off, std::int64_t cnt) { grads_ready(L, off, cnt, step, lr); };
  auto gate = [&](std::int64_t off, std::int64_t cnt) { L.pipeline->before_forward(off, cnt); };
  const WorkloadConfig& w = L.config.workload;
  if (L.simulated) {  // the same gates and reports, layer by layer
    return simulated_step(L.model, 1e-3 * w.simulated_step_ms * (L.straggler.active() ? w.straggler_slowdown : 1.0),
                          ready, gate);
  }
  return L.model.train_step(L.images.data(), L.labels.data(), static_cast<int>(batch.size()), ready, gate);
}

// Returns the step's training loss (NaN under simulated compute).
double train_step(Loop& L, std::span<const std::int64_t> batch, std::int64_t step, int epoch, double lr) {
  KVClient& kv = L.session.kv();
  TraceSpan step_span(L.trace, TraceLevel::kSteps, "step", "worker");
  step_span.arg("step", step).arg("epoch", epoch).arg("images", static_cast<std::int64_t>(batch.size()));
  const auto t0 = Clock::now();
  L.loss_checked = false;
  L.skipping_step = false;
  L.tickets.clear();
  L.pipeline->begin_step();
  start_weights(L, step);
  const double forward_wait_before = L.pipeline->forward_wait_s();
  const auto t1 = Clock::now();

  const double injected_s = L.simulated ? 0.0 : L.straggler.delay();
  const auto n = static_cast<int>(batch.size());
  if (!L.simulated) {
    TraceSpan data_span(L.trace, TraceLevel::kSteps, "data", "worker");
    L.data.train.gather(batch, L.images.data(), L.labels.data());
  }
  const nn::StepStats s = compute_step(L, batch, step, lr);
  grads_ready(L, 0, L.session.shard_map().total_elems(), step, lr);  // anything not yet sent
  L.pipeline->wait_jobs();  // every push sent: the KV client is this thread's again
  L.result.blocked_s += 1e-6 * static_cast<double>(L.pull_parked_us);
  // The next step's weights are requested now: the servers answer as soon as
  // the policy allows (sync: this step's update applied), without another
  // round trip.
  L.prefetch = send_pull(L, step + 1);
  const auto t2 = Clock::now();

  double staleness = 0.0;
  {
    TraceSpan wait_span(L.trace, TraceLevel::kSteps, "push wait", "worker");
    wait_span.arg("requests", static_cast<std::int64_t>(L.tickets.size()));
    for (auto t : L.tickets) staleness = std::max(staleness, kv.wait(t).mean_staleness);
  }
  const auto t3 = Clock::now();

  // Pull time: sending the pull, and the forward's waits for weights.
  const double pull_s = seconds_between(t0, t1) + (L.pipeline->forward_wait_s() - forward_wait_before);
  L.last_compute_s = seconds_between(t0, t2) - pull_s;
  L.straggler.record(L.last_compute_s - injected_s);
  L.result.compute_s += L.last_compute_s;
  L.result.pull_s += pull_s;
  L.result.push_s += seconds_between(t2, t3);
  L.result.images += n;
  write_step_record(L.metrics, StepRecord{step, epoch, n, L.simulated ? nullptr : &s, seconds_between(t0, t3),
                                          L.last_compute_s, pull_s, seconds_between(t2, t3), lr,
                                          staleness, L.skipping_step});
  L.guard.end_step(step, lr, L.skipping_step);  // throws after max_skipped_steps in a row
  L.result.skipped_steps = L.guard.skipped_steps();
  return L.simulated ? std::numeric_limits<double>::quiet_NaN() : s.loss;
}

// A checkpoint after `steps_done` steps (worker/train/worker_checkpoint.h):
// this worker's part, the barrier (every push of the steps before is then
// applied and every server's part written), then the lowest live worker the
// manifest. `at`: the step after them, where the recorded membership history is cut (history_before).
// `on_news`: answers a membership change announced while it waits in the barrier (membership_answer.h).
// This worker's part of the checkpoint after `steps_done` steps, its history cut at `at` (that step's place).
WorkerCheckpoint checkpoint_part(Loop& L, std::int64_t steps_done, const EpochDriver::NextStep& at) {
  WorkerCheckpoint c;
  c.step = steps_done;
  c.dropout_step = L.model.dropout_step();
  c.time_s = L.metrics.elapsed_s();
  c.metrics_bytes = L.metrics.size();
  c.result = L.result;
  if (L.members != nullptr) c.epoch_members = L.members->history_before(at.epoch, at.step);
  return c;
}

void take_checkpoint(Loop& L, std::int64_t steps_done, const EpochDriver::NextStep& at,
                     const std::function<void()>& on_news) {
  TraceSpan span(L.trace, TraceLevel::kSteps, "checkpoint", "worker");
  span.arg("step", steps_done);
  SchedulerClient& scheduler = L.session.scheduler();
  const std::int64_t server_failures = scheduler.server_failures();
  write_worker_part(L.config, L.session.rank(), checkpoint_part(L, steps_done, at));
  scheduler.barrier("checkpoint " + std::to_string(steps_done), on_news);
  finish_ps_checkpoint(scheduler, L.session.rank(), L.config, steps_done, L.model.num_params(), L.session.num_servers(),
                       server_failures, L.log);
}

// The copy engine and pipeline; the KV client's pull replies feed it, and
// the model leaves ordering its gradients' reads to the copy engine.
void start_pipeline(Loop& L) {
  choose_buffers(L);
  L.engine = make_copy_engine(L.model.backend(), L.trace);
  PipelineBuffers buffers;
  buffers.device_grads = L.simulated ? nullptr : L.model.device_grads();
  if (L.bfloat16) {  // the engine narrows and widens: half the bytes cross PCIe, no host conversion pass
    L.engine->register_host(L.wire_grads.data(), L.wire_grads.size_bytes());
    L.engine->register_host(L.wire_params.data(), L.wire_params.size() * sizeof(std::uint16_t));
    buffers.wire_grads = L.wire_grads;
    buffers.wire_params = L.wire_params;
    buffers.device_params = L.model.device_params();
  } else {
    L.engine->register_host(L.weights.data(), L.weights.size_bytes());
    L.engine->register_host(L.grads.values.data(), L.grads.values.size_bytes());
    buffers.host_grads = L.grads.values;
    buffers.host_params = L.weights;
    buffers.device_params = weights_in_model(L) ? nullptr : L.model.device_params();  // pulled into place: no upload
    // Pulled into place: a large chunk's pages are mapped from the server's arena, not copied
    // (worker/client/pull_pages.h; the model's parameters are pages of their own, nn::CpuBackend).
    const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
    if (weights_in_model(L) && reinterpret_cast<std::uintptr_t>(L.weights.data()) % page == 0) {
      L.session.kv().map_pulls_into(L.weights);
    }
  }
  L.pipeline = std::make_unique<CopyPipeline>(L.session.shard_map(), *L.engine, buffers, L.trace);
  CopyPipeline* pipeline = L.pipeline.get();
  L.session.kv().set_pull_arrival([pipeline](std::int64_t key) { pipeline->chunk_arrived(key); });
  L.model.set_sync_before_grads_ready(!L.model.backend().is_cuda());
}

// The final pull's weights (bfloat16 on the wire with a device backend: as widened into the model).
void write_final(Loop& L) {
  if (L.bfloat16 && !weights_in_model(L)) L.model.get_params(L.weights);
  write_final_weights(L.config.output.run_dir, L.model.layout(), L.weights);
}

// Whether this worker evaluates the final weights and writes weights.bin, after the final
// barrier: worker 0, or the lowest worker left once worker 0 was dropped ("continue"; asked of
// the scheduler, as a checkpoint's manifest writer is). Before, a job whose worker 0 was dropped
// ended well without weights.bin, its summary's final accuracy that of worker 0's last epoch.
bool writes_final(Loop& L) {
  const int rank = L.session.rank();
  return rank == 0 || lowest_live_worker(L.session.scheduler(), L.config.cluster.timeout_ms) == rank;
}

// Completes the last prefetch (its weights are not needed).
void kv_wait_quietly(Loop& L) {
  L.session.kv().wait(*L.prefetch);
  L.pipeline->pull_complete();
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

// The weights and the step training starts from: a joiner's boundary (the
// weights the servers hold for it), a rejoiner's step, a checkpoint's, or
// worker 0's initial weights at step 0.
std::int64_t initial_weights(Loop& L, const WorkerCheckpoint* resume, bool rejoin, const JoinStart* joined) {
  WorkerSession& session = L.session;
  if (joined != nullptr) {  // its weights (sync: after step S-1 was applied) and checkpoint: in its first step
    write_join_record(L.metrics, *joined);
    L.log.info("joined the job at step " + std::to_string(joined->global_step) + " (epoch " +
               std::to_string(joined->epoch) + " step " + std::to_string(joined->from_step) + ")");
    return joined->global_step;
  }
  if (rejoin) {  // the servers hold the job's current weights: pull them, join at their step
    TraceSpan span(L.trace, TraceLevel::kSteps, "rejoin", "worker");
    const std::int64_t start_step = rejoin_ps_job(session, L.weights, L.config.cluster, L.log);
    write_rejoin_record(L.metrics, start_step);
    // Joined at a checkpoint step: the others' barrier, at the start of its first step (enter_first_step).
    return start_step;
  }
  TraceSpan span(L.trace, TraceLevel::kSteps, "initial weights", "worker");
  if (resume != nullptr) {  // the servers hold the checkpoint's weights: pull them
    session.kv().wait(session.kv().pull(L.weights, resume->step));
    session.scheduler().barrier("initial weights");
    const double time_s = L.result.time_s;
    L.result = resume->result;
    L.result.time_s = time_s;
    return resume->step;
  }
  session.broadcast_initial(L.weights);  // worker 0's initial weights everywhere
  return 0;
}

// Where a joiner or a rejoiner enters, at the start of its first step `s`, where the driver knows the
// step after it (docs/architecture.md, "Elastic membership"): the weights of `s` (pull_entry_weights),
// then a rejoiner's answers and checkpoint (enter_rejoined, ps_rejoin.h), or a joiner's checkpoint at `s`
// (when the others had not finished it: `joiner_checkpoint`), without a part; every wait answers a
// change announced meanwhile with the step after `s` (answer_ahead).
void enter_first_step(Loop& L, const EpochDriver& driver, MembershipAnswers& answers, std::int64_t s, bool rejoin,
                      bool joiner_checkpoint) {
  SchedulerClient& scheduler = L.session.scheduler();
  const int servers = L.session.num_servers();
  const std::function<void()> answer = [&] { answers.answer_ahead(scheduler, L.session.rank(), driver.next_step()); };
  {
    TraceSpan span(L.trace, TraceLevel::kSteps, "initial weights", "worker");
    // Said before the wait (bounded by cluster.timeout_ms), so that an entry stuck there shows where.
    L.log.info("entering at step " + std::to_string(s) + ": pulling its weights");
    pull_entry_weights(L.session, L.weights, s, answer);  // answering a change meanwhile (ps_rejoin.h)
  }
  if (rejoin) {
    enter_rejoined(scheduler, L.config, s, L.model.num_params(), servers, L.log, answers, driver.next_step(),
                   [&] { return checkpoint_part(L, s, driver.this_step()); });
    return;
  }
  if (joiner_checkpoint) pass_rejoin_checkpoint(scheduler, L.config, s, L.model.num_params(), servers, L.log, answer);
}

// A rejoiner with no step left (async: the others ended meanwhile) still takes the others' barrier of
// the checkpoint at its step, answering a change with `end`.
void enter_without_step(Loop& L, MembershipAnswers& answers, std::int64_t s) {
  SchedulerClient& scheduler = L.session.scheduler();
  EpochDriver::NextStep end;
  end.end = true;
  pass_rejoin_checkpoint(scheduler, L.config, s, L.model.num_params(), L.session.num_servers(), L.log,
                         [&] { answers.answer_ahead(scheduler, L.session.rank(), end); });
}

// A joiner whose change found no step left: it never entered the job (the
// scheduler vacated its slot and said shutdown).
TrainResult abandoned_join(Loop& L) {
  L.log.info("the job had no step left to join at: leaving without training");
  L.result.retired = true;
  L.result.time_s = L.metrics.elapsed_s();
  write_end_record(L.metrics, L.result);
  return L.result;
}

// The end of a worker that ran `step` steps to the end (the last in `epoch`): the final barrier, then
// the final weights' evaluation and weights.bin when they are its to write, and its end record.
TrainResult finish_run(Loop& L, std::int64_t step, int epoch) {
  {
    TraceSpan span(L.trace, TraceLevel::kSteps, "final barrier", "worker");
    if (L.prefetch) kv_wait_quietly(L);
    L.session.scheduler().barrier(std::string(kFinalBarrier));  // every push of every worker has been applied
  }
  L.result.steps = step;
  L.result.time_s = L.metrics.elapsed_s();
  if (writes_final(L)) {
    evaluate_and_record(L, step, epoch, L.result.time_s);
    write_final(L);
  }
  write_end_record(L.metrics, L.result);
  return L.result;
}

}  // namespace


TrainResult run_ps_worker(const RunConfig& config, WorkerSession& session, Workload& workload, MetricsWriter& metrics,
                          Logger& log, TraceRecorder* trace, const WorkerCheckpoint* resume, bool rejoin, bool join) {
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
  const PipelineHooks hooks{L};
  start_pipeline(L);
  const data::Dataset& train = workload.data.train;
  L.images.resize(static_cast<std::size_t>(w.batch_size) * static_cast<std::size_t>(train.channels * train.height * train.width));
  L.labels.resize(static_cast<std::size_t>(w.batch_size));

  if (!weights_in_model(L)) model.get_params(L.weights);
  std::optional<JoinStart> joined;
  if (join) {  // its change's boundary: where it starts
    TraceSpan span(trace, TraceLevel::kSteps, "join", "worker");
    joined = wait_for_join_start(session.scheduler(), config.cluster.timeout_ms, log);
    if (!joined) return abandoned_join(L);
  }
  const std::int64_t start_step = initial_weights(L, resume, rejoin, joined ? &*joined : nullptr);
  if (!weights_in_model(L)) model.set_params(L.weights);
  model.set_dropout_seed(w.seed * 1000003ULL + static_cast<std::uint64_t>(session.rank()));
  if (resume != nullptr) model.set_dropout_step(resume->dropout_step);

  EpochDriver driver(config, train, session.rank(), session.num_workers());
  // Each epoch's workers: the scheduler's answer (the survivors after a drop), the checkpoint's for epochs begun before it.
  EpochMembers members(EpochMembers::from_scheduler(session.scheduler(), config.cluster.timeout_ms),
                       resume != nullptr ? resume->epoch_members : std::vector<std::int64_t>{});
  if (joined) learn_join_segments(session.scheduler(), *joined, members, config.cluster.timeout_ms);
  if (rejoin && max_workers(config.cluster) > config.cluster.num_workers) learn_decided_segments(session.scheduler(), members);
  L.members = &members;
  MembershipAnswers answers;  // elastic membership: this worker's answers to the changes announced
  // A joiner's or rejoiner's weights, answers and checkpoint: at its first step (enter_first_step).
  bool entering = joined || rejoin;
  log.info("training " + std::to_string(driver.total_steps()) + " steps (" + std::to_string(driver.steps_per_epoch()) +
           " per epoch) in " + std::string(to_string(config.mode)) + " mode with " +
           std::to_string(session.num_workers()) + " workers, " + std::to_string(session.num_servers()) +
           " servers; " + session.shard_map().summary());
  const std::int64_t step = driver.run(
      log, metrics, L.result.images,
      [&](std::span<const std::int64_t> batch, std::int64_t s, int epoch, double lr) {
        if (std::exchange(entering, false)) {
          enter_first_step(L, driver, answers, s, rejoin, joined && joined->take_checkpoint);
        }
        const double loss = train_step(L, batch, s, epoch, lr);
        const EpochDriver::NextStep next = driver.next_step(), after = driver.step_after_next();
        answers.answer(session.scheduler(), session.rank(), next, after);
        if (checkpoint_due(config, s + 1)) {
          take_checkpoint(L, s + 1, next, [&] { answers.answer_heard(session.scheduler(), session.rank(), next, after); });
        }
        answers.settle(session.scheduler(), members, config.cluster.timeout_ms, log);
        return loss;
      },
      [&](std::int64_t s, int epoch, bool last) {
        if (session.rank() == 0 && !last) evaluate_and_record(L, s, epoch, L.metrics.elapsed_s());
      },
      start_step, &members);
  if (entering && rejoin) enter_without_step(L, answers, start_step);
  if (driver.retired()) return retire(L, step);
  return finish_run(L, step, driver.epoch_after(step));
}

}  // namespace pstrain
