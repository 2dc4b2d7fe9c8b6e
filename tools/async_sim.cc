// async_sim: async SGD with an injected, fixed staleness on the real workload,
// deterministic and in one process (worker/train/delayed_sgd.h). It measures
// whether the rate and momentum the servers would use for a config survive
// the staleness W asynchronous workers bring, without the timing noise of a
// real run.
//   async_sim --config FILE [--set k=v ...] [--staleness S] [--updates N]
//             [--eval-every N] [--json FILE]
// Staleness defaults to cluster.workers - 1 (round-robin asynchrony).
// Prints one table row: workers, staleness, base lr, servers' momentum,
// updates run, diverged at, final train loss, test accuracy (%).
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/config/config.h"
#include "common/base/json_line.h"
#include "common/base/log.h"
#include "common/node/node_cli.h"
#include "worker/train/delayed_sgd.h"
#include "worker/train/workload.h"

namespace {

int run(const std::string& config_path, const std::vector<std::string>& overrides, int staleness,
        std::int64_t updates, std::int64_t eval_every, const std::string& json_path) {
  using namespace pstrain;
  RunConfig config = load_config(config_path);
  apply_overrides(config, overrides);
  Logger log("async_sim", parse_log_level(config.output.log_level));
  Workload workload = make_workload(config, config.workload.batch_size, log);
  DelayedSgdOptions o;
  o.staleness = staleness >= 0 ? staleness : config.cluster.num_workers - 1;
  o.updates = updates;
  o.eval_every = eval_every;
  const DelayedSgdResult r = run_delayed_sgd(config, workload, o, log);
  std::printf("| mode | workers | staleness | base lr | momentum (servers) | updates | diverged at | train loss | "
              "test accuracy (%%) |\n|---|---|---|---|---|---|---|---|---|\n");
  std::printf("| %s | %d | %d | %.4g | %.4g | %lld | %s | %.4f | %s |\n", std::string(to_string(config.mode)).c_str(),
              config.cluster.num_workers, o.staleness, r.lr, r.momentum, static_cast<long long>(r.updates),
              r.diverged ? std::to_string(r.diverged_at).c_str() : "-", r.final_train_loss,
              r.diverged ? "-" : std::to_string(100.0 * r.final_test_accuracy).substr(0, 5).c_str());
  if (!json_path.empty()) {
    std::string curve = "[";
    for (const auto& [u, acc] : r.test_accuracy) {
      curve += (curve.size() > 1 ? "," : "") + ("[" + std::to_string(u) + "," + std::to_string(acc) + "]");
    }
    curve += "]";
    std::ofstream out(json_path);
    out << JsonLine().add("mode", std::string(to_string(config.mode))).add("workers", config.cluster.num_workers)
               .add("staleness", o.staleness).add("base_lr", r.lr).add("momentum", r.momentum)
               .add("updates", r.updates).add("diverged", r.diverged).add("diverged_at", r.diverged_at)
               .add("final_train_loss", r.final_train_loss).add("final_test_accuracy", r.final_test_accuracy)
               .raw("test_accuracy", curve).str()
        << "\n";
    if (!out) throw Error("cannot write " + json_path);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"async_sim: async SGD with an injected fixed staleness on a pstrain workload (one process)"};
  std::string config_path, json_path;
  std::vector<std::string> overrides;
  int staleness = -1;
  std::int64_t updates = 400, eval_every = 0;
  app.add_option("--config", config_path, "the run's TOML file")->required();
  app.add_option("--set", overrides, "override a config key (repeatable)");
  app.add_option("--staleness", staleness, "updates between a gradient's weights and its apply (default workers - 1)");
  app.add_option("--updates", updates, "updates in all (default 400)");
  app.add_option("--eval-every", eval_every, "evaluate the test set every N updates (default: only at the end)");
  app.add_option("--json", json_path, "also write the result as one JSON object");
  CLI11_PARSE(app, argc, argv);
  return pstrain::guarded_main("async_sim", [&] {
    return run(config_path, overrides, staleness, updates, eval_every, json_path);
  });
}
