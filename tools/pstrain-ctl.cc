// pstrain-ctl: asks a running job to change its number of workers
// (elastic membership, docs/architecture.md "Elastic membership").
//
//   pstrain-ctl RUN_DIR workers N
//
// It checks N against the run's cluster.min_workers and max_workers (its
// config.toml) and appends the request "workers N" to RUN_DIR/ctl.txt,
// which the job's scheduler reads (pstrain-scheduler --ctl-file; `launch`
// passes it; docs/run_directory.md). A shrink retires the highest ranks at
// a step boundary the scheduler picks; a grow is read by the launcher too,
// which starts the missing workers with --join (tools/launcher/grow.h), each
// entering the job at the boundary of the change its registration starts.
// The scheduler's log says what it did or why it refused (a change already
// under way...). No port is opened: whoever may write RUN_DIR may resize its job.
//
// Exit codes: 0 requested; 2 bad arguments or N out of the run's bounds;
// 3 RUN_DIR is not a running job's directory.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <CLI/CLI.hpp>

#include "common/base/errors.h"
#include "common/config/config.h"

int main(int argc, char** argv) {
  CLI::App app{"pstrain-ctl: ask a running job for another number of workers"};
  std::string run_dir, what;
  int workers = 0;
  app.add_option("run_dir", run_dir, "the running job's run directory")->required();
  app.add_option("what", what, "what to change: 'workers'")->required()->check(CLI::IsMember({"workers"}));
  app.add_option("count", workers, "the number of workers the job should have")->required();
  CLI11_PARSE(app, argc, argv);
  const std::filesystem::path dir(run_dir);
  const std::filesystem::path config_file = dir / "config.toml";
  if (!std::filesystem::exists(config_file) || !std::filesystem::exists(dir / "scheduler.endpoint")) {
    std::fprintf(stderr, "pstrain-ctl: %s is not a running job's run directory (no config.toml or scheduler.endpoint)\n",
                 run_dir.c_str());
    return 3;
  }
  try {
    const pstrain::RunConfig config = pstrain::load_config(config_file.string());
    const pstrain::ClusterConfig& c = config.cluster;
    const int low = pstrain::min_workers(c);
    const int high = pstrain::max_workers(c);
    if (workers < low || workers > high) {
      std::fprintf(stderr,
                   "pstrain-ctl: %d workers refused: the job may have %d to %d (cluster.min_workers and "
                   "cluster.max_workers in %s)\n",
                   workers, low, high, config_file.c_str());
      return 2;
    }
  } catch (const pstrain::Error& e) {
    std::fprintf(stderr, "pstrain-ctl: %s\n", e.what());
    return 3;
  }
  std::ofstream out(dir / "ctl.txt", std::ios::app);
  out << "workers " << workers << "\n";
  if (!out.flush()) {
    std::fprintf(stderr, "pstrain-ctl: cannot append to %s\n", (dir / "ctl.txt").c_str());
    return 3;
  }
  std::printf("asked the job in %s for %d workers (its scheduler's log says when it takes effect)\n", run_dir.c_str(),
              workers);
  return 0;
}
