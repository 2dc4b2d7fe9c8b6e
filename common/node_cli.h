// What every pstrain process takes on its command line, and the one place
// that turns an exception into an exit code.
//
//   --config FILE         the run's TOML file (required)
//   --set KEY=VALUE       override a config key (repeatable), e.g. --set mode=async
//   --rank N              this node's rank within its role; default: from the
//                         launcher's environment (SLURM_PROCID, OMPI_COMM_WORLD_RANK,
//                         PMI_RANK, PMIX_RANK) minus the role's offset, else assigned
//   --scheduler ENDPOINT  overrides cluster.scheduler (the launcher passes the
//                         scheduler's actual port when the config says port 0)
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/config.h"

namespace pstrain {

struct NodeArgs {
  std::string config_path;
  std::vector<std::string> overrides;
  int rank = -1;
  std::string scheduler;
};

void add_node_options(CLI::App& app, NodeArgs& args);
// Loads the config and applies the overrides and --scheduler.
RunConfig load_node_config(const NodeArgs& args);

// The global rank a launcher gave this process, if any.
std::optional<int> launcher_rank();
// Rank within a role for a process launched as one of a job's global ranks:
// global rank 0 is the scheduler, 1..S the servers, S+1..S+W the workers.
// Returns -1 when no launcher rank is set.
int role_rank_from_launcher(int role_offset, int role_count, const char* role_name);

// Runs `body`, mapping exceptions to one clear line on stderr and an exit
// code: 0 ok, 1 error, 2 job aborted by a peer's failure, 3 usage/config error.
int guarded_main(const char* program, const std::function<int()>& body);

}  // namespace pstrain
