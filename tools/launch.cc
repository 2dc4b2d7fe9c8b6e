// launch: runs a whole pstrain job on this machine.
//
//   launch --config FILE [--set key=value]... [--run-dir DIR] [--bin-dir DIR]
//          [--quiet] [--timeout-s S] [--startup-timeout-s S]
//          [--shutdown-timeout-s S] [--grace-s S] [--status-interval-s S]
//
// Checks the config (nothing starts if it is wrong), writes the resolved
// config to <run_dir>/config.toml, starts pstrain-scheduler, then the servers
// and workers (each told the scheduler's actual endpoint), streams their
// output (one "[  12.345 worker 1] " prefix per line, job clock) and into
// <run_dir>/logs/, shows a live status line (steps, recent steps/s, loss,
// ETA; redrawn in place on a terminal, else a plain line every
// --status-interval-s), and stops them all if one fails or on Ctrl-C. When
// all exit 0 it writes summary.json/summary.md and prints the summary. Run
// directory format: docs/run_directory.md.
//
// Exit codes: 0 ok; 1 a process failed, a timeout, or the summary failed;
// 3 config or usage error (nothing started); 128+N stopped by signal N.
#include <unistd.h>

#include <climits>
#include <filesystem>

#include <CLI/CLI.hpp>

#include "tools/launcher/launcher.h"

namespace {

// The directory of this executable: the node programs are built next to it.
std::filesystem::path own_directory(const char* argv0) {
  char path[PATH_MAX] = {};
  const ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (n > 0) return std::filesystem::path(std::string(path, static_cast<std::size_t>(n))).parent_path();
  return std::filesystem::absolute(argv0).parent_path();
}

void add_options(CLI::App& app, pstrain::launcher::LaunchOptions& o, double& timeout_s) {
  app.add_option("--config", o.request.config_path, "run configuration (TOML)")->required();
  app.add_option("--set", o.request.overrides, "override a config key: section.key=value (repeatable)");
  app.add_option("--run-dir", o.request.run_dir, "run directory (default: output.run_dir of the config)");
  app.add_option("--bin-dir", o.request.bin_dir, "directory of pstrain-scheduler/-server/-worker (default: ours)");
  app.add_flag("--quiet", o.quiet, "do not echo the processes' output (it still goes to the run's logs/)");
  app.add_option("--timeout-s", timeout_s, "stop the run if it takes longer than this (default: no limit)")
      ->check(CLI::PositiveNumber);
  app.add_option("--startup-timeout-s", o.startup_timeout_s, "limit for the scheduler to start listening")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--shutdown-timeout-s", o.shutdown_timeout_s,
                 "limit for the servers and workers to exit once the scheduler has ended the job")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--status-interval-s", o.status_interval_s,
                 "live status: seconds between plain status lines when stdout is not a terminal (on a terminal "
                 "one line is redrawn in place); 0 = no status")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--grace-s", o.grace_s, "seconds between SIGTERM and SIGKILL when stopping processes")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"launch: run a pstrain job (scheduler, servers, workers) on this machine"};
  pstrain::launcher::LaunchOptions options;
  double timeout_s = 0;
  add_options(app, options, timeout_s);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : pstrain::kExitConfig;
  }
  if (timeout_s > 0) options.timeout_s = timeout_s;
  if (options.request.bin_dir.empty()) options.request.bin_dir = own_directory(argv[0]);
  return pstrain::launcher::run_launch(options);
}
