// The launcher's side of the run directory (docs/run_directory.md).
#pragma once

#include <filesystem>
#include <optional>
#include <string>

namespace pstrain::launcher {

// Creates run_dir, run_dir/logs and run_dir/metrics, and removes the files a
// previous run there left (config.toml, logs/*.log, metrics/worker-*.jsonl,
// metrics/server-*.json, summary.*, pids.txt, scheduler.endpoint,
// trace.json, trace/*.json), nothing
// else. Returns how many it removed. Throws Error naming the path.
int prepare_run_dir(const std::filesystem::path& run_dir);

// The endpoint in a file the scheduler wrote (one line); empty if the file
// does not exist yet or has no complete line.
std::optional<std::string> read_endpoint_file(const std::filesystem::path& file);

}  // namespace pstrain::launcher
