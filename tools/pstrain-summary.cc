// pstrain-summary: (re)builds summary.json and summary.md of a run directory
// from its config.toml and metrics, and prints the summary: for runs started
// without `launch` (tools/pstrain-node.sh under SLURM or mpirun, or by hand),
// and for any run whose summary was lost or predates a change of the report.
//
//   pstrain-summary RUN_DIR [--quiet]
//
// Exit codes: 0 written; 3 the directory is not a run directory (no
// config.toml, or unreadable metrics), with the reason on stderr.
#include <cstdio>
#include <filesystem>
#include <string>

#include <CLI/CLI.hpp>

#include "common/base/errors.h"
#include "tools/report/summary.h"

int main(int argc, char** argv) {
  CLI::App app{"pstrain-summary: rebuild a run directory's summary.json and summary.md from its metrics"};
  std::string run_dir;
  bool quiet = false;
  app.add_option("run_dir", run_dir, "the run directory (holds config.toml and metrics/)")->required();
  app.add_flag("--quiet", quiet, "write the files, print nothing");
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
  try {
    const pstrain::report::RunSummary s = pstrain::report::write_run_summary(dir);
    if (!quiet) std::printf("%s\nRun directory: %s\n", pstrain::report::summary_markdown(s, run_dir).c_str(), run_dir.c_str());
    return pstrain::kExitOk;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pstrain-summary: %s: %s\n", run_dir.c_str(), e.what());
    return pstrain::kExitConfig;
  }
}
