// pstrain-keygen DIR [--workers N] [--force]: writes a job's CURVE key files
// into DIR (common/wire/security.h lists them: bind.*, server.*, and with
// --workers N one worker-R.* per worker rank, else the shared worker.*;
// mode 0600). Per-worker keys: a stolen worker key acts as that rank only.
// Copy DIR to every machine of the job (or only the files each role needs)
// and set security.mode = "curve", security.key_dir = DIR.
// pstrain-keygen --secret FILE [--force]: writes a job secret for
// security.mode = "off" (common/wire/job_secret.h; mode 0600): every node of
// a job started without `launch` reads it (security.secret_file = FILE, or
// PSTRAIN_SECRET_FILE=FILE in its environment).
#include <cstdio>
#include <filesystem>
#include <string>

#include <CLI/CLI.hpp>

#include "common/base/errors.h"
#include "common/node/node_cli.h"
#include "common/wire/job_secret.h"
#include "common/wire/security.h"

int main(int argc, char** argv) {
  CLI::App app{"Writes a pstrain job's CURVE keys (security.mode = \"curve\") or its secret (\"off\")"};
  std::string dir;
  std::string secret;
  bool force = false;
  int workers = 0;
  app.add_option("dir", dir, "directory for the key files (created if missing)");
  app.add_option("--secret", secret, "write a job secret (security.mode = \"off\") to this file instead of keys");
  app.add_flag("--force", force, "replace existing key files (or secret file)");
  app.add_option("--workers", workers,
                 "one keypair per worker rank (worker-0.key ... worker-<N-1>.key) instead of one shared worker.key")
      ->check(CLI::Range(1, 1 << 20));
  CLI11_PARSE(app, argc, argv);
  return pstrain::guarded_main("pstrain-keygen", [&] {
    if (secret.empty() == dir.empty()) {
      throw pstrain::ConfigError("pstrain-keygen: give either DIR (CURVE keys) or --secret FILE (a job secret)");
    }
    if (!secret.empty()) {
      if (!force && std::filesystem::exists(secret)) {
        throw pstrain::Error("secret file " + secret + " already exists (pass --force to replace it)");
      }
      if (const auto parent = std::filesystem::path(secret).parent_path(); !parent.empty()) {
        std::filesystem::create_directories(parent);
      }
      pstrain::write_secret_file(secret, pstrain::generate_job_secret());
      std::printf("wrote a job secret to %s (mode 0600): give every node security.secret_file = %s\n",
                  secret.c_str(), secret.c_str());
      return 0;
    }
    pstrain::write_job_keys(dir, force, workers);
    const std::string worker_files =
        workers > 0 ? "worker-0.key/.pub ... worker-" + std::to_string(workers - 1) + ".key/.pub" : "worker.key/.pub";
    std::printf("wrote the job's CURVE keys to %s (bind.key/.pub, server.key/.pub, %s)\n", dir.c_str(),
                worker_files.c_str());
    return 0;
  });
}
