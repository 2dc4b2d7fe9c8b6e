// pstrain-keygen DIR [--force]: writes a job's CURVE key files into DIR
// (common/security.h lists them: bind.*, server.*, worker.*; mode 0600).
// Copy DIR to every machine of the job (or only the files each role needs)
// and set security.mode = "curve", security.key_dir = DIR.
#include <cstdio>
#include <string>

#include <CLI/CLI.hpp>

#include "common/node_cli.h"
#include "common/security.h"

int main(int argc, char** argv) {
  CLI::App app{"Writes a pstrain job's CURVE keys (security.mode = \"curve\")"};
  std::string dir;
  bool force = false;
  app.add_option("dir", dir, "directory for the key files (created if missing)")->required();
  app.add_flag("--force", force, "replace existing key files");
  CLI11_PARSE(app, argc, argv);
  return pstrain::guarded_main("pstrain-keygen", [&] {
    pstrain::write_job_keys(dir, force);
    std::printf("wrote the job's CURVE keys to %s (bind.key/.pub, server.key/.pub, worker.key/.pub)\n", dir.c_str());
    return 0;
  });
}
