// pstrain-keygen DIR [--workers N] [--force]: writes a job's CURVE key files
// into DIR (common/wire/security.h lists them: bind.*, server.*, and with
// --workers N one worker-R.* per worker rank, else the shared worker.*;
// mode 0600). Per-worker keys: a stolen worker key acts as that rank only.
// Copy DIR to every machine of the job (or only the files each role needs)
// and set security.mode = "curve", security.key_dir = DIR.
#include <cstdio>
#include <string>

#include <CLI/CLI.hpp>

#include "common/node/node_cli.h"
#include "common/wire/security.h"

int main(int argc, char** argv) {
  CLI::App app{"Writes a pstrain job's CURVE keys (security.mode = \"curve\")"};
  std::string dir;
  bool force = false;
  int workers = 0;
  app.add_option("dir", dir, "directory for the key files (created if missing)")->required();
  app.add_flag("--force", force, "replace existing key files");
  app.add_option("--workers", workers,
                 "one keypair per worker rank (worker-0.key ... worker-<N-1>.key) instead of one shared worker.key")
      ->check(CLI::Range(1, 1 << 20));
  CLI11_PARSE(app, argc, argv);
  return pstrain::guarded_main("pstrain-keygen", [&] {
    pstrain::write_job_keys(dir, force, workers);
    const std::string worker_files =
        workers > 0 ? "worker-0.key/.pub ... worker-" + std::to_string(workers - 1) + ".key/.pub" : "worker.key/.pub";
    std::printf("wrote the job's CURVE keys to %s (bind.key/.pub, server.key/.pub, %s)\n", dir.c_str(),
                worker_files.c_str());
    return 0;
  });
}
