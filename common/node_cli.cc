#include "common/node_cli.h"

#include <cstdio>
#include <cstdlib>

#include "common/errors.h"

namespace pstrain {

void add_node_options(CLI::App& app, NodeArgs& args) {
  app.add_option("--config", args.config_path, "run configuration (TOML)")->required();
  app.add_option("--set", args.overrides, "override a config key: section.key=value (repeatable)");
  app.add_option("--rank", args.rank, "this node's rank within its role (default: from the launcher or assigned)");
  app.add_option("--scheduler", args.scheduler, "scheduler endpoint (overrides cluster.scheduler)");
}

RunConfig load_node_config(const NodeArgs& args) {
  RunConfig config = load_config(args.config_path);
  for (const std::string& o : args.overrides) apply_override(config, o);
  if (!args.scheduler.empty()) config.cluster.scheduler = args.scheduler;
  return config;
}

std::optional<int> launcher_rank() {
  for (const char* name : {"SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"}) {
    if (const char* value = std::getenv(name)) {
      char* end = nullptr;
      const long rank = std::strtol(value, &end, 10);
      if (end == value || *end != '\0' || rank < 0) {
        throw ConfigError(std::string("environment variable ") + name + "='" + value + "' is not a rank");
      }
      return static_cast<int>(rank);
    }
  }
  return std::nullopt;
}

int role_rank_from_launcher(int role_offset, int role_count, const char* role_name) {
  const auto global = launcher_rank();
  if (!global) return -1;
  const int rank = *global - role_offset;
  if (rank < 0 || rank >= role_count) {
    throw ConfigError("launcher rank " + std::to_string(*global) + " is not a " + role_name + ": " + role_name +
                      "s are global ranks " + std::to_string(role_offset) + ".." +
                      std::to_string(role_offset + role_count - 1));
  }
  return rank;
}

int guarded_main(const char* program, const std::function<int()>& body) {
  try {
    return body();
  } catch (const CLI::ParseError&) {
    throw;  // the caller's CLI11_PARSE handles usage errors
  } catch (const ConfigError& e) {
    std::fprintf(stderr, "%s: config error: %s\n", program, e.what());
    return 3;
  } catch (const AbortedError& e) {
    std::fprintf(stderr, "%s: %s\n", program, e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", program, e.what());
    return 1;
  }
}

}  // namespace pstrain
