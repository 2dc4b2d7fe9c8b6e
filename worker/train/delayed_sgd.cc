// Async SGD with an injected staleness; see delayed_sgd.h.
#include "worker/train/delayed_sgd.h"

#include <cmath>
#include <deque>
#include <numeric>

#include "common/base/errors.h"
#include "common/math/lr_schedule.h"
#include "common/math/optimizer.h"
#include "worker/data/shard_sampler.h"
#include "worker/train/epoch_driver.h"

namespace pstrain {

namespace {

bool all_finite(const std::vector<float>& v) {
  return std::all_of(v.begin(), v.end(), [](float x) { return std::isfinite(x); });
}

}  // namespace

DelayedSgdResult run_delayed_sgd(const RunConfig& config, Workload& workload, const DelayedSgdOptions& options,
                                 Logger& log) {
  const int workers = config.cluster.num_workers;
  if (options.staleness < 0) throw ConfigError("delayed sgd: staleness must be >= 0");
  if (options.updates < 1) throw ConfigError("delayed sgd: updates must be >= 1");
  nn::Model& model = *workload.model;
  const data::Dataset& train = workload.data.train;
  const int batch = config.workload.batch_size;
  const auto n = static_cast<std::size_t>(model.num_params());

  // One sampler per virtual worker, as the real workers shard the data.
  std::vector<data::ShardSampler> samplers;
  for (int w = 0; w < workers; ++w) samplers.emplace_back(train.num_samples, workers, w, config.workload.seed);
  const std::int64_t per_epoch = steps_per_epoch(samplers.front().num_samples_per_replica(), batch);
  const std::int64_t worker_steps = (options.updates + workers - 1) / workers;
  const LrSchedule schedule(config.optimizer, config.schedule, per_epoch, worker_steps, samples_per_update(config));
  const OptimizerConfig server = server_optimizer(config);
  const std::unique_ptr<Optimizer> optimizer = make_optimizer(server, model.num_params());

  const bool inverse = config.optimizer.staleness_rule == "inverse";
  DelayedSgdResult result;
  result.lr = schedule.base_lr();
  result.momentum = server.momentum;

  std::vector<float> weights(n);
  model.get_params(weights);
  std::deque<std::vector<float>> history{weights};  // history.front(): the weights `staleness` updates ago
  std::vector<float> grads(n);
  std::vector<float> images(static_cast<std::size_t>(batch) *
                            static_cast<std::size_t>(train.channels * train.height * train.width));
  std::vector<std::int32_t> labels(static_cast<std::size_t>(batch));
  std::vector<std::vector<std::int64_t>> order(static_cast<std::size_t>(workers));
  std::vector<double> recent_loss;

  auto evaluate_now = [&](std::int64_t u) {
    model.set_params(weights);
    const double acc = evaluate(model, workload.data.test).accuracy;
    result.test_accuracy.emplace_back(u, acc);
    return acc;
  };

  for (std::int64_t u = 0; u < options.updates; ++u) {
    const int w = static_cast<int>(u % workers);
    const std::int64_t step = u / workers;  // this worker's step
    const std::int64_t in_epoch = step % per_epoch;
    auto& indices = order[static_cast<std::size_t>(w)];
    if (in_epoch == 0) indices = samplers[static_cast<std::size_t>(w)].indices(static_cast<int>(step / per_epoch));
    const auto begin = static_cast<std::size_t>(in_epoch * batch);
    const auto end = std::min(indices.size(), begin + static_cast<std::size_t>(batch));
    train.gather(std::span(indices).subspan(begin, end - begin), images.data(), labels.data());

    model.set_params(history.front());  // the weights this worker pulled
    model.set_dropout_seed(config.workload.seed * 1000003ULL + static_cast<std::uint64_t>(u));
    const nn::StepStats s = model.train_step(images.data(), labels.data(), static_cast<int>(end - begin));
    model.get_grads(grads);
    if (!std::isfinite(s.loss) || !all_finite(grads)) {
      result.diverged = true;
      result.diverged_at = u;
      result.updates = u;
      result.final_test_accuracy = -1.0;
      log.info("delayed sgd: diverged at update " + std::to_string(u) + " (loss " + std::to_string(s.loss) + ")");
      return result;
    }
    recent_loss.push_back(s.loss);
    if (recent_loss.size() > 20) recent_loss.erase(recent_loss.begin());
    // The servers' staleness rule, as ShardStore applies it: lr / staleness.
    const std::int64_t staleness = std::min<std::int64_t>(u, options.staleness);
    const double lr = inverse && staleness > 1 ? schedule.lr_at(step) / static_cast<double>(staleness)
                                               : schedule.lr_at(step);
    optimizer->step(weights, grads, lr);
    history.push_back(weights);
    while (history.size() > static_cast<std::size_t>(options.staleness) + 1) history.pop_front();
    if (options.eval_every > 0 && (u + 1) % options.eval_every == 0 && u + 1 < options.updates) evaluate_now(u + 1);
  }
  result.updates = options.updates;
  result.final_train_loss = std::accumulate(recent_loss.begin(), recent_loss.end(), 0.0) /
                            static_cast<double>(std::max<std::size_t>(recent_loss.size(), 1));
  result.final_test_accuracy = evaluate_now(options.updates);
  return result;
}

}  // namespace pstrain
