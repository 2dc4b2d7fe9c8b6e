#include "worker/train/local_trainer.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <span>

#include "common/base/errors.h"
#include "common/base/json_line.h"
#include "common/math/lr_schedule.h"
#include "worker/data/shard_sampler.h"
#include "worker/nn/device_optimizer.h"
#include "worker/train/records.h"
#include "worker/train/workload.h"

namespace pstrain {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Running means over the steps since the last progress line.
struct Window {
  double loss_sum = 0.0;
  std::int64_t correct = 0;
  std::int64_t images = 0;
  int steps = 0;
  double time_s = 0.0;
};

// Host staging buffers for one batch, and the step loop's state.
struct Loop {
  Workload& workload;
  nn::DeviceOptimizer& optimizer;
  MetricsWriter& metrics;
  Logger& log;
  std::vector<float> images;
  std::vector<std::int32_t> labels;
  LocalTrainResult result;
  Window window;
  bool graphs = false;  // workload.cuda_graphs: full batches as one CUDA graph (the backend says if it can)
  int full_batch = 0;
};

// One step's device work: forward, backward, update, synchronized. A full batch with graphs
// on may run as one CUDA graph (nn::Backend::begin_graph_step): the whole step, the boundary
// being the host's gather before it and the loss read after it. Its results are the same.
nn::StepStats device_step(Loop& L, int n, double lr) {
  nn::Model& model = *L.workload.model;
  nn::Backend& backend = model.backend();
  if (!(L.graphs && n == L.full_batch && backend.begin_graph_step(n))) {
    const nn::StepStats stats = model.train_step(L.images.data(), L.labels.data(), n);
    L.optimizer.step(model.device_params(), model.device_grads(), lr);
    backend.synchronize();
    return stats;
  }
  try {
    nn::StepStats stats = model.train_step(L.images.data(), L.labels.data(), n);
    L.optimizer.step(model.device_params(), model.device_grads(), lr);
    const nn::Backend::XentResult loss = backend.end_graph_step();
    stats.loss = loss.loss_sum / n;
    stats.correct = loss.correct;
    return stats;
  } catch (const ComputeError& e) {
    backend.abort_graph_step();
    throw ComputeError(std::string(e.what()) + " (in a CUDA graph step; workload.cuda_graphs = false runs without)");
  }
}

void train_step(Loop& L, std::span<const std::int64_t> batch, std::int64_t step, int epoch, double lr) {
  const Clock::time_point start = Clock::now();
  L.workload.data.train.gather(batch, L.images.data(), L.labels.data());
  const int n = static_cast<int>(batch.size());
  const nn::StepStats stats = device_step(L, n, lr);
  const double step_s = seconds_since(start);
  L.result.train_time_s += step_s;
  L.result.images += n;
  L.window.loss_sum += stats.loss * n;
  L.window.correct += stats.correct;
  L.window.images += n;
  L.window.time_s += step_s;
  ++L.window.steps;
  L.metrics.write(JsonLine().add("type", "step").add("time_s", L.result.train_time_s).add("step", step)
                      .add("epoch", epoch).add("batch", n).add("loss", stats.loss)
                      .add("accuracy", static_cast<double>(stats.correct) / n).add("images_per_s", n / step_s)
                      .add("compute_ms", step_s * 1e3).add("pull_ms", 0.0).add("push_ms", 0.0).add("lr", lr)
                      .add("staleness", 0.0).add("simulated", false));
}

void log_progress(Loop& L, int epoch, std::int64_t step_in_epoch, std::int64_t per_epoch, double lr) {
  const Window& w = L.window;
  char line[200];
  std::snprintf(line, sizeof(line), "epoch %d step %lld/%lld: loss %.4f accuracy %.4f lr %.5g %.0f images/s",
                epoch + 1, static_cast<long long>(step_in_epoch + 1), static_cast<long long>(per_epoch),
                w.loss_sum / static_cast<double>(w.images), static_cast<double>(w.correct) / static_cast<double>(w.images),
                lr, static_cast<double>(w.images) / w.time_s);
  L.log.info(line);
  L.window = Window{};
}

void evaluate_epoch(Loop& L, int epoch, std::int64_t steps) {
  const EvalResult eval = evaluate(*L.workload.model, L.workload.data.test);
  L.result.epochs.push_back(LocalEpochResult{epoch, steps, eval.loss, eval.accuracy, L.result.train_time_s});
  L.result.final_test_loss = eval.loss;
  L.result.final_test_accuracy = eval.accuracy;
  L.metrics.write(JsonLine().add("type", "eval").add("time_s", L.result.train_time_s).add("step", steps)
                      .add("epoch", epoch).add("test_loss", eval.loss).add("test_accuracy", eval.accuracy));
  char line[160];
  std::snprintf(line, sizeof(line), "epoch %d: test accuracy %.4f, test loss %.4f (%.1f s of training)", epoch + 1,
                eval.accuracy, eval.loss, L.result.train_time_s);
  L.log.info(line);
}

}  // namespace

LocalTrainResult train_local(const RunConfig& config, MetricsWriter& metrics, Logger& log) {
  const WorkloadConfig& w = config.workload;
  if (w.batch_size < 1 || w.epochs < 1) {
    throw ConfigError("train_local: workload.batch_size " + std::to_string(w.batch_size) + " and workload.epochs " +
                      std::to_string(w.epochs) + " must both be >= 1");
  }
  Workload workload = make_workload(config, w.batch_size, log);
  write_compute_record(metrics, *workload.backend);
  nn::Model& model = *workload.model;
  nn::DeviceOptimizer optimizer(config.optimizer, model.backend(), model.num_params());
  const data::Dataset& train = workload.data.train;
  Loop L{workload, optimizer, metrics, log,
         std::vector<float>(static_cast<std::size_t>(w.batch_size * train.sample_num_elems())),
         std::vector<std::int32_t>(static_cast<std::size_t>(w.batch_size)), {}, {}, w.cuda_graphs, w.batch_size};

  const data::ShardSampler sampler(train.num_samples, 1, 0, w.seed);
  const std::int64_t per_epoch = (sampler.num_samples_per_replica() + w.batch_size - 1) / w.batch_size;
  std::int64_t total = per_epoch * w.epochs;
  if (w.max_steps > 0) total = std::min(total, w.max_steps);
  const LrSchedule schedule(config.optimizer, config.schedule, per_epoch, total, w.batch_size);
  const std::int64_t log_every = std::max<std::int64_t>(per_epoch / 10, 1);
  log.info("training " + std::to_string(total) + " steps (" + std::to_string(per_epoch) + " per epoch, batch " +
           std::to_string(w.batch_size) + ") with " + config.optimizer.name + ", base lr " +
           std::to_string(schedule.base_lr()) + ", decay " + config.schedule.decay);

  std::int64_t step = 0;
  for (int epoch = 0; epoch < w.epochs && step < total; ++epoch) {
    const std::vector<std::int64_t> indices = sampler.indices(epoch);
    for (std::int64_t b = 0; b < per_epoch && step < total; ++b, ++step) {
      const auto begin = static_cast<std::size_t>(b * w.batch_size);
      const auto end = std::min(indices.size(), begin + static_cast<std::size_t>(w.batch_size));
      const double lr = schedule.lr_at(step);
      train_step(L, std::span(indices).subspan(begin, end - begin), step, epoch, lr);
      if ((b + 1) % log_every == 0 || b + 1 == per_epoch || step + 1 == total) log_progress(L, epoch, b, per_epoch, lr);
    }
    evaluate_epoch(L, epoch, step);
  }
  L.result.steps = step;
  metrics.write(JsonLine().add("type", "end").add("time_s", L.result.train_time_s).add("steps", L.result.steps)
                    .add("images", L.result.images).add("compute_s", L.result.train_time_s).add("pull_s", 0.0)
                    .add("push_s", 0.0));
  return L.result;
}

}  // namespace pstrain
