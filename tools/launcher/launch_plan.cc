#include "tools/launcher/launch_plan.h"

#include <unistd.h>

#include <system_error>

#include "common/checkpoint.h"
#include "common/errors.h"
#include "common/model_names.h"
#include "tools/launcher/config_site.h"
#include "worker/data/load_dataset.h"

namespace pstrain::launcher {
namespace {

namespace fs = std::filesystem;

std::string quoted(const std::string& s) { return "'" + s + "'"; }

void check_dataset(const LaunchRequest& request, const RunConfig& config) {
  if (config.workload.dataset == "synthetic") return;
  const std::string& dir = config.workload.data_path;
  std::error_code ec;
  if (fs::is_directory(dir, ec)) return;
  const std::string problem = fs::exists(dir, ec) ? "is not a directory" : "does not exist";
  throw ConfigError(key_site(request.config_path, request.overrides, "workload.data_path") +
                    ": key 'workload.data_path': dataset directory " + quoted(dir) + " " + problem +
                    " (workload.dataset = \"" + config.workload.dataset + "\")");
}

bool is_this_machine(const std::string& host) {
  if (host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0) return true;
  char name[256] = {};
  return gethostname(name, sizeof(name) - 1) == 0 && host == name;
}

void check_hosts(const LaunchRequest& request, const std::vector<std::string>& hosts, const char* key) {
  for (const std::string& host : hosts) {
    if (is_this_machine(host)) continue;
    throw ConfigError(key_site(request.config_path, request.overrides, key) + ": key '" + key + "': host " +
                      quoted(host) +
                      " is not this machine; the local launcher starts every process here (use SLURM or "
                      "mpirun for runs over several machines)");
  }
}

void check_model(const LaunchRequest& request, const RunConfig& config) {
  if (is_known_model(config.workload.model)) return;
  throw ConfigError(key_site(request.config_path, request.overrides, "workload.model") +
                    ": key 'workload.model': unknown model " + quoted(config.workload.model) +
                    "; known models: " + known_model_list());
}

// Each worker trains on ceil(N / workers) samples an epoch (worker/data/shard_sampler.h);
// a larger batch would silently become one short batch an epoch.
void check_batch_fits_shard(const LaunchRequest& request, const RunConfig& config) {
  const WorkloadConfig& w = config.workload;
  data::LoadOptions options;
  options.synthetic_train = w.synthetic_train;
  std::int64_t samples = 0;
  try {
    samples = data::train_set_size(w.dataset, w.data_path, options);
  } catch (const Error& e) {
    throw ConfigError(key_site(request.config_path, request.overrides, "workload.data_path") +
                      ": key 'workload.data_path': cannot read the training set's size: " + e.what());
  }
  const int workers = config.cluster.num_workers;
  const std::int64_t shard = (samples + workers - 1) / workers;
  if (w.batch_size <= shard) return;
  throw ConfigError(key_site(request.config_path, request.overrides, "workload.batch_size") +
                    ": key 'workload.batch_size': " + std::to_string(w.batch_size) +
                    " is larger than a worker's shard: " + std::to_string(samples) + " training samples (" +
                    w.dataset + ") / " + std::to_string(workers) + " workers = " + std::to_string(shard) +
                    " per worker, so every epoch would be one batch of " + std::to_string(shard) +
                    "; use workload.batch_size <= " + std::to_string(shard) + " or fewer workers");
}

void check_programs(const fs::path& bin_dir, bool with_servers) {
  for (const char* program : {"pstrain-scheduler", "pstrain-server", "pstrain-worker"}) {
    if (!with_servers && std::string_view(program) == "pstrain-server") continue;
    const fs::path path = bin_dir / program;
    if (access(path.c_str(), X_OK) != 0) {
      throw ConfigError("bin dir " + bin_dir.string() + ": no executable " + program +
                        " (build it, or pass --bin-dir DIR)");
    }
  }
}

std::vector<std::string> node_argv(const LaunchPlan& plan, const char* program, const std::string& endpoint,
                                   int rank) {
  std::vector<std::string> argv{(plan.bin_dir / program).string(), "--config", plan.config_file().string(),
                                "--scheduler", endpoint, "--rank", std::to_string(rank)};
  if (!plan.resume_dir.empty()) argv.insert(argv.end(), {"--resume", plan.resume_dir.string()});
  return argv;
}

// --resume: the checkpoint to start from, checked against the config.
void choose_checkpoint(const LaunchRequest& request, LaunchPlan& plan) {
  try {
    const FoundCheckpoint found = resolve_resume(fs::absolute(request.resume), plan.config, &plan.resume_skipped);
    plan.resume_dir = found.dir;
    plan.resume_step = found.manifest.step;
    const std::string diff = fingerprint_mismatch(found.manifest.fingerprint, checkpoint_fingerprint(plan.config));
    if (!diff.empty()) {
      throw ConfigError("--resume " + request.resume + ": " + found.dir.filename().string() +
                        " was written by another job and cannot be resumed with this config: " + diff);
    }
  } catch (const CheckpointError& e) {
    std::string why = e.what();
    for (const std::string& s : plan.resume_skipped) why += "; passed over " + s;
    throw ConfigError(why);
  }
}

}  // namespace

LaunchPlan plan_launch(const LaunchRequest& request) {
  LaunchPlan plan;
  const std::string config_path = !request.config_path.empty() || request.resume.empty()
                                      ? request.config_path
                                      : (fs::path(request.resume) / "config.toml").string();
  plan.config = load_config(config_path);
  for (const std::string& o : request.overrides) apply_override(plan.config, o);
  const std::string run_dir = !request.run_dir.empty() ? request.run_dir
                              : !request.resume.empty() ? request.resume
                                                        : plan.config.output.run_dir;
  plan.run_dir = fs::absolute(run_dir).lexically_normal();
  plan.config.output.run_dir = plan.run_dir.string();
  plan.bin_dir = fs::absolute(request.bin_dir).lexically_normal();
  plan.num_workers = plan.config.cluster.num_workers;
  plan.num_servers = plan.config.mode == Mode::kAllreduce ? 0 : plan.config.cluster.num_servers;
  check_model(request, plan.config);
  check_dataset(request, plan.config);
  check_batch_fits_shard(request, plan.config);
  check_hosts(request, plan.config.cluster.server_hosts, "cluster.server_hosts");
  check_hosts(request, plan.config.cluster.worker_hosts, "cluster.worker_hosts");
  check_programs(plan.bin_dir, plan.num_servers > 0);
  if (!request.resume.empty()) choose_checkpoint(request, plan);
  return plan;
}

NodeSpec scheduler_spec(const LaunchPlan& plan) {
  return NodeSpec{"scheduler", "scheduler",
                  {(plan.bin_dir / "pstrain-scheduler").string(), "--config", plan.config_file().string(),
                   "--endpoint-file", plan.endpoint_file().string()}};
}

std::vector<NodeSpec> node_specs(const LaunchPlan& plan, const std::string& scheduler_endpoint) {
  std::vector<NodeSpec> specs;
  for (int s = 0; s < plan.num_servers; ++s) {
    specs.push_back({"server " + std::to_string(s), "server-" + std::to_string(s),
                     node_argv(plan, "pstrain-server", scheduler_endpoint, s)});
  }
  for (int w = 0; w < plan.num_workers; ++w) {
    specs.push_back({"worker " + std::to_string(w), "worker-" + std::to_string(w),
                     node_argv(plan, "pstrain-worker", scheduler_endpoint, w)});
  }
  return specs;
}

}  // namespace pstrain::launcher
