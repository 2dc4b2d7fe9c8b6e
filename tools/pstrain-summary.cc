// pstrain-summary: (re)builds summary.json and summary.md of a run directory
// from its config.toml and metrics, and prints the summary: for runs started
// without `launch` (tools/pstrain-node.sh under SLURM or mpirun, or by hand),
// and for any run whose summary was lost or predates a change of the report.
//
//   pstrain-summary RUN_DIR [--quiet]
//   pstrain-summary --partial [--reason TEXT] RUN_DIR [--quiet]
//
// --partial: a run that did not finish (interrupted, failed): a summary of
// what ran until then, marked partial with the reason (--reason, else the
// one an earlier partial summary recorded, which `launch` writes itself at
// such an end). Without it such a run is refused (exit 3) and the error
// names --partial.
//
// Exit codes: 0 written; 3 the directory is not a run directory (no
// config.toml, or unreadable metrics), with the reason on stderr.
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "common/base/errors.h"
#include "tools/report/summary.h"

int main(int argc, char** argv) {
  CLI::App app{"pstrain-summary: rebuild a run directory's summary.json and summary.md from its metrics"};
  std::string run_dir;
  std::string reason;
  bool quiet = false;
  bool partial = false;
  app.add_option("run_dir", run_dir, "the run directory (holds config.toml and metrics/)")->required();
  app.add_flag("--quiet", quiet, "write the files, print nothing");
  app.add_flag("--partial", partial,
               "the run did not finish (interrupted or failed): summarize what ran, marked partial");
  app.add_option("--reason", reason, "with --partial: why the run ended (default: the reason recorded earlier)");
  CLI11_PARSE(app, argc, argv);
  const std::filesystem::path dir(run_dir);
  if (!std::filesystem::is_directory(dir)) {
    std::fprintf(stderr, "pstrain-summary: %s: no such directory\n", run_dir.c_str());
    return pstrain::kExitConfig;
  }
  if (!std::filesystem::exists(dir / "config.toml")) {
    std::fprintf(stderr,
                 "pstrain-summary: %s has no config.toml: not a run directory (launch writes it, and so does the "
                 "scheduler of a job started without launch)\n",
                 run_dir.c_str());
    return pstrain::kExitConfig;
  }
  if (!reason.empty() && !partial) {
    std::fprintf(stderr, "pstrain-summary: --reason is for a partial summary: add --partial\n");
    return pstrain::kExitConfig;
  }
  try {
    std::optional<pstrain::report::PartialRun> how;
    if (partial) {
      if (reason.empty()) reason = pstrain::report::recorded_partial_reason(dir);
      how = pstrain::report::PartialRun{reason.empty() ? "ended before every worker finished; no reason recorded"
                                                       : reason};
    }
    const pstrain::report::RunSummary s = pstrain::report::write_run_summary(dir, how ? &*how : nullptr);
    if (!quiet) std::printf("%s\nRun directory: %s\n", pstrain::report::summary_markdown(s, run_dir).c_str(), run_dir.c_str());
    return pstrain::kExitOk;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pstrain-summary: %s: %s\n", run_dir.c_str(), e.what());
    return pstrain::kExitConfig;
  }
}
