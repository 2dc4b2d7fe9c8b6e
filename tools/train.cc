// train: single-worker training without servers (worker/train/local_trainer.h).
//   train --config FILE [--set section.key=value ...]
// Logs progress to stderr, writes run_dir/metrics/worker-0.jsonl, and prints
// the final test accuracy on stdout.
#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/config/config.h"
#include "common/base/log.h"
#include "common/node/node_cli.h"
#include "worker/train/local_trainer.h"

namespace {

int run(const std::string& config_path, const std::vector<std::string>& overrides) {
  using namespace pstrain;
  RunConfig config = load_config(config_path);
  apply_overrides(config, overrides);
  Logger log("train", parse_log_level(config.output.log_level));
  MetricsWriter metrics(config.output.run_dir, "worker-0.jsonl");
  const LocalTrainResult r = train_local(config, metrics, log);
  std::printf("final test accuracy %.4f (test loss %.4f) after %zu epochs, %lld steps, %.1f s of training (%.0f images/s)\n",
              r.final_test_accuracy, r.final_test_loss, r.epochs.size(), static_cast<long long>(r.steps),
              r.train_time_s, static_cast<double>(r.images) / r.train_time_s);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"train: single-worker training of a pstrain workload (no servers)"};
  std::string config_path;
  std::vector<std::string> overrides;
  app.add_option("--config", config_path, "the run's TOML file")->required();
  app.add_option("--set", overrides, "override a config key, e.g. --set workload.epochs=2 (repeatable)");
  CLI11_PARSE(app, argc, argv);
  return pstrain::guarded_main("train", [&] { return run(config_path, overrides); });
}
