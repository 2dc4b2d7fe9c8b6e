// launch: runs a whole pstrain job on this machine.
//
//   launch --config FILE [--set key=value]... [--run-dir DIR] [--bin-dir DIR]
//          [--check] [--quiet] [--timeout-s S] [--startup-timeout-s S]
//          [--shutdown-timeout-s S] [--grace-s S] [--status-interval-s S]
//   launch FILE [...]     the same: the config may also be the one positional argument
//   launch --resume RUN_DIR [--set key=value]...
//                         goes on from the run's newest complete checkpoint
//                         (config: RUN_DIR/config.toml unless --config is
//                         given; it must match the checkpoint's mode, model,
//                         shard map and node counts, else exit 3). The run's
//                         files are kept: metrics and logs are appended to.
//
// An unknown option is named, with the closest known one ("--cofnig: unknown
// option; did you mean --config?"). --check does every check, prints the
// resolved config and exits, touching nothing.
//
// Checks the config (nothing starts or changes if it is wrong), locks the run
// directory (RUN_DIR/launch.lock: a second launch on it is refused while the
// first lives), moves a previous run's files aside to RUN_DIR.prev-<time>/,
// writes the resolved config to <run_dir>/config.toml, starts pstrain-scheduler, then the servers
// and workers (each told the scheduler's actual endpoint), streams their
// output (one "[  12.345 worker 1] " prefix per line, job clock) and into
// <run_dir>/logs/, shows a live status line (steps, epoch, recent steps/s,
// loss, accuracy, ETA, dropped workers; redrawn in place on a terminal, else
// a plain line every --status-interval-s; a last "done" line in every
// ending: tools/launcher/status_line.h), tells the scheduler at once of a
// node's exit the job goes on without (common/node/exit_report.h), and stops
// them all if one fails or on Ctrl-C. When all exit 0 it writes
// summary.json/summary.md and prints the summary; a run interrupted or failed
// gets a partial one (its "partial_reason" says why). Run directory format:
// docs/run_directory.md.
//
// Exit codes: 0 ok; 1 a process failed, a timeout, or the summary failed;
// 3 config or usage error, or the run directory in use (nothing started);
// 128+N stopped by signal N.
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

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

// Levenshtein distance, for "did you mean".
std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

// "--cofnig: unknown option; did you mean --config?"
std::string unknown_option_message(const CLI::App& app, const std::string& given) {
  const std::string name = given.substr(0, given.find('='));
  std::string best;
  std::size_t best_distance = 3;  // suggest only close ones
  for (const CLI::Option* option : app.get_options()) {
    for (const std::string& long_name : option->get_lnames()) {
      const std::size_t d = edit_distance(name, "--" + long_name);
      if (d < best_distance) best_distance = d, best = "--" + long_name;
    }
  }
  return name + ": unknown option" + (best.empty() ? "; see --help" : "; did you mean " + best + "?");
}

void add_options(CLI::App& app, pstrain::launcher::LaunchOptions& o, double& timeout_s, std::string& positional) {
  app.add_option("--config", o.request.config_path, "run configuration (TOML)");
  app.add_option("config_file", positional, "the run configuration, as a positional argument (same as --config)");
  app.add_flag("--check", o.check_only,
               "check the config (every check a launch makes), print the resolved config and exit; starts and "
               "changes nothing");
  app.add_option("--set", o.request.overrides, "override a config key: section.key=value (repeatable)");
  app.add_option("--resume", o.request.resume,
                 "go on from the newest complete checkpoint of this run directory (config: its config.toml unless "
                 "--config is given)");
  app.add_option("--run-dir", o.request.run_dir, "run directory (default: output.run_dir of the config)");
  app.add_option("--bin-dir", o.request.bin_dir, "directory of pstrain-scheduler/-server/-worker (default: ours)");
  app.add_option("--ssh", o.request.ssh_command,
                 "how to reach the hosts in cluster.server_hosts/worker_hosts that are not this machine "
                 "(default: \"ssh -o BatchMode=yes\"; the same paths must exist there)");
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
  std::string positional;
  add_options(app, options, timeout_s, positional);
  app.allow_extras();  // named below, with a suggestion
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : pstrain::kExitConfig;
  }
  const auto usage_error = [](const std::string& message) {
    std::fprintf(stderr, "launch: %s\n", message.c_str());
    return pstrain::kExitConfig;
  };
  for (const std::string& extra : app.remaining()) {
    if (extra.size() > 1 && extra[0] == '-') return usage_error(unknown_option_message(app, extra));
    return usage_error("unexpected argument '" + extra + "' (the config is given once: --config FILE or FILE)");
  }
  if (!positional.empty() && !options.request.config_path.empty()) {
    return usage_error("the config is given twice ('" + positional + "' and --config " +
                       options.request.config_path + "); give it once");
  }
  if (!positional.empty()) options.request.config_path = positional;
  if (options.request.config_path.empty() && options.request.resume.empty()) {
    return usage_error("no config: give it as --config FILE (or as the one positional argument); see --help");
  }
  if (timeout_s > 0) options.timeout_s = timeout_s;
  if (options.request.bin_dir.empty()) options.request.bin_dir = own_directory(argv[0]);
  return pstrain::launcher::run_launch(options);
}
