#include "tools/launcher/launch_plan.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <map>

#include <unistd.h>

#include <system_error>

#include "common/base/endpoint_address.h"
#include "common/checkpoint/checkpoint.h"
#include "common/checkpoint/checkpoint_members.h"
#include "common/base/errors.h"
#include "common/base/job_clock.h"
#include "common/config/model_names.h"
#include "common/node/node_cli.h"
#include "common/wire/job_secret.h"
#include "common/wire/security.h"
#include "tools/launcher/config_site.h"
#include "tools/launcher/gpu_check.h"
#include "tools/launcher/port_check.h"
#include "tools/launcher/remote.h"
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

// Hosts that are not this machine are started over ssh (remote.h); they
// must then dial the scheduler by a name other hosts can reach.
std::string check_hosts(const LaunchRequest& request, const RunConfig& config) {
  bool any_remote = false;
  for (const auto* hosts : {&config.cluster.server_hosts, &config.cluster.worker_hosts}) {
    for (const std::string& host : *hosts) any_remote = any_remote || !is_this_machine(host);
  }
  if (!any_remote) return "";
  if (config.mode != Mode::kAllreduce && config.cluster.server_hosts.empty()) {
    throw ConfigError(key_site(request.config_path, request.overrides, "cluster.worker_hosts") +
                      ": key 'cluster.worker_hosts': workers on other hosts need cluster.server_hosts too (without "
                      "it the servers listen on this machine's loopback only)");
  }
  const std::string& endpoint = config.cluster.scheduler;
  const std::string host = tcp_host(endpoint).value_or("");
  if (host.empty() || host == "localhost" || host.rfind("127.", 0) == 0 || host == "*" || host == "0.0.0.0") {
    throw ConfigError(key_site(request.config_path, request.overrides, "cluster.scheduler") +
                      ": key 'cluster.scheduler': " + quoted(endpoint) +
                      " cannot be dialed from the other hosts in cluster.server_hosts/worker_hosts; name this "
                      "machine as they reach it (tcp://HOST:PORT, port 0 for any free port)");
  }
  ssh_argv(request.ssh_command, "", "");  // the ssh program is there (ConfigError otherwise), before anything starts
  return host;
}

// A fixed port that another process holds (or that two nodes of this job
// would share) would fail its node after the launch had started and moved
// the previous run aside; refused here instead, naming the key.
void check_ports(const LaunchRequest& request, const RunConfig& config) {
  const std::vector<PlannedPort> ports = planned_ports(config);
  const auto site = [&](const PlannedPort& p) {
    return key_site(request.config_path, request.overrides, p.key) + ": key '" + p.key + "': ";
  };
  for (std::size_t i = 0; i < ports.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j) {
      if (ports[j].port != ports[i].port) continue;
      throw ConfigError(site(ports[i]) + ports[i].who + " and " + ports[j].who + " would both listen on port " +
                        std::to_string(ports[i].port) + "; choose ports that do not overlap, or 0 for any free port");
    }
  }
  for (const PlannedPort& p : ports) {
    const std::string problem = tcp_bind_problem(p.host, p.port);
    if (problem.empty()) continue;
    throw ConfigError(site(p) + p.who + " cannot listen on port " + std::to_string(p.port) + " of " + p.host + " (" +
                      problem + "): stop what holds it, choose another port, or 0 for any free port");
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

// Curve: keys from security.key_dir (each role's files must be readable),
// or, when it is empty, fresh ones the launcher writes into RUN_DIR/keys.
void plan_keys(const LaunchRequest& request, LaunchPlan& plan) {
  SecurityConfig& sec = plan.config.security;
  if (sec.mode != "curve") return;
  if (sec.key_dir.empty()) {
    plan.generate_keys_in = plan.run_dir / "keys";
    sec.key_dir = plan.generate_keys_in.string();
    return;
  }
  sec.key_dir = fs::absolute(sec.key_dir).lexically_normal().string();
  try {
    for (const Role role : {Role::kScheduler, Role::kServer}) SecurityContext::load(sec, role);
    for (int w = 0; w < plan.config.cluster.num_workers; ++w) SecurityContext::load(sec, Role::kWorker, w);
  } catch (const ConfigError& e) {
    throw ConfigError(key_site(request.config_path, request.overrides, "security.key_dir") +
                      ": key 'security.key_dir': " + e.what());
  }
}

// Off: admission by the job's secret. Unless security.secret_file names a
// file of the user's (checked here), a fresh one for this run in
// RUN_DIR/secret (a resume too: every node starts again).
void plan_secret(const LaunchRequest& request, LaunchPlan& plan) {
  SecurityConfig& sec = plan.config.security;
  if (sec.mode == "curve") return;
  const fs::path ours = plan.run_dir / "secret";
  if (sec.secret_file.empty() || fs::absolute(sec.secret_file).lexically_normal() == ours) {
    plan.generate_secret_in = ours;
    sec.secret_file = ours.string();
    return;
  }
  sec.secret_file = fs::absolute(sec.secret_file).lexically_normal().string();
  try {
    read_secret_file(sec.secret_file);
  } catch (const ConfigError& e) {
    throw ConfigError(key_site(request.config_path, request.overrides, "security.secret_file") +
                      ": key 'security.secret_file': " + e.what());
  }
}

bool loopback(const std::string& host) { return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0; }

// security.mode left unset while some node is not on loopback: the line
// that says what the launcher chose and why (empty otherwise).
std::string security_note(const LaunchRequest& request, const RunConfig& config) {
  if (key_set(request.config_path, request.overrides, "security.mode")) return "";
  std::vector<std::string> beyond;  // hosts not on loopback, in order, once each
  const auto note = [&beyond](const std::string& host) {
    if (!loopback(host) && std::find(beyond.begin(), beyond.end(), host) == beyond.end()) beyond.push_back(host);
  };
  note(tcp_host(config.cluster.scheduler).value_or("127.0.0.1"));  // "*" or 0.0.0.0: every interface
  for (const std::string& host : config.cluster.server_hosts) note(host);
  for (const std::string& host : config.cluster.worker_hosts) note(host);
  std::string hosts;
  for (const std::string& host : beyond) hosts += (hosts.empty() ? "" : ", ") + host;
  if (hosts.empty()) return "";
  return "security.mode is not set and this job reaches beyond loopback (" + hosts +
         "): chose \"off\" (no encryption; only nodes holding this run's secret, RUN_DIR/secret, are admitted "
         "at registration), because \"curve\" costs much of the throughput; but anyone who can read this network "
         "sees the traffic and its session tokens: set security.mode = \"curve\" to encrypt, or \"off\" to "
         "keep this choice and silence this line";
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

// --resume of an elastic job: the checkpoint's members (its record), or,
// without a record, the refusal of a checkpoint taken after a grow.
void resume_membership(const LaunchRequest& request, const FoundCheckpoint& found, LaunchPlan& plan) {
  const ClusterConfig& cl = plan.config.cluster;
  if (!is_elastic(cl)) return;  // a fixed-size job resumes its cluster.workers workers
  if (!found.manifest.members.empty()) {
    try {
      plan.resume_workers = resume_members(found.manifest, cl);
    } catch (const CheckpointError& e) {
      throw ConfigError("--resume " + request.resume + ": " + found.dir.filename().string() + ": " + e.what());
    }
    plan.num_workers = static_cast<int>(plan.resume_workers.size());
    return;
  }
  // Only a job that could grow can have grown (a fixed one's parts are not read again here).
  const std::string grown =
      max_workers(cl) > cl.num_workers ? grown_checkpoint_refusal(found.manifest, found.dir, cl.num_workers) : "";
  if (!grown.empty()) throw ConfigError("--resume " + request.resume + ": " + grown);
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
    resume_membership(request, found, plan);
  } catch (const CheckpointError& e) {
    std::string why = e.what();
    for (const std::string& s : plan.resume_skipped) why += "; passed over " + s;
    throw ConfigError(why);
  }
}

// GPUs the workers on this machine need (tools/launcher/gpu_check.h).
void check_local_gpus(const LaunchRequest& request, LaunchPlan& plan) {
  int local = 0;
  for (const int w : plan.worker_ranks()) {
    if (!plan.remote(plan.worker_host(w))) ++local;
  }
#if defined(PSTRAIN_HAVE_NCCL)
  constexpr bool kNcclBuilt = true;
#else
  constexpr bool kNcclBuilt = false;
#endif
  const GpuCheck check = check_gpus(plan.config, local, probe_gpu_presence(), kNcclBuilt);
  if (!check.problem.empty()) {
    throw ConfigError(key_site(request.config_path, request.overrides, check.key) + ": key '" + check.key + "': " +
                      check.problem);
  }
  if (!check.note.empty()) plan.notes.push_back(check.note);
}

}  // namespace

int highest_member_rank(const std::vector<std::int64_t>& v) {
  int highest = -1;
  std::size_t i = 0;
  while (i < v.size()) {
    std::size_t at = i + 1;                       // past the epoch
    if (at < v.size() && v[at] < 0) ++at;         // a later segment's -from_step
    if (at >= v.size() || v[at] < 0 || v[at] > static_cast<std::int64_t>(v.size() - at - 1)) {
      throw CheckpointError("epoch_members: a segment at position " + std::to_string(i) +
                            " is not [epoch, (-from_step,) count, ranks...]");
    }
    for (std::int64_t k = 0; k < v[at]; ++k) highest = std::max(highest, static_cast<int>(v[at + 1 + k]));
    i = at + 1 + static_cast<std::size_t>(v[at]);
  }
  return highest;
}

std::string grown_checkpoint_refusal(const CheckpointManifest& m, const fs::path& dir, int workers) {
  int highest = -1;
  for (const CheckpointPartInfo& p : m.parts) {
    if (!p.name.starts_with("worker-")) continue;
    const std::string digits = p.name.substr(7, p.name.find('.') == std::string::npos ? std::string::npos
                                                                                         : p.name.find('.') - 7);
    int rank = -1;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), rank);
    if (ec == std::errc() && end == digits.data() + digits.size()) highest = std::max(highest, rank);
    const CheckpointPart part = read_checkpoint_part(dir, p.name);
    if (part.has("epoch_members")) highest = std::max(highest, highest_member_rank(part.i64s("epoch_members")));
  }
  if (highest < workers) return "";
  return dir.filename().string() + " was taken after the job grew past cluster.workers = " + std::to_string(workers) +
         " (worker " + std::to_string(highest) + " is a member) and records no membership to resume at (" +
         (m.members.empty() && m.format >= 2 ? "checkpoints of builds before the record have none" : "no record") +
         "); a resume at cluster.workers would leave the grown workers' share of the interrupted epoch untrained";
}

LaunchPlan plan_launch(const LaunchRequest& request) {
  LaunchPlan plan;
  const std::string config_path = !request.config_path.empty() || request.resume.empty()
                                      ? request.config_path
                                      : (fs::path(request.resume) / "config.toml").string();
  plan.config = load_config(config_path);
  apply_overrides(plan.config, request.overrides);
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
  plan.scheduler_host = check_hosts(request, plan.config);
  check_ports(request, plan.config);
  check_local_gpus(request, plan);
  plan.ssh_command = request.ssh_command;
  plan.work_dir = fs::current_path();
  check_programs(plan.bin_dir, plan.num_servers > 0);
  plan_keys(request, plan);
  plan_secret(request, plan);
  plan.security_note = security_note(request, plan.config);
  if (!request.resume.empty()) choose_checkpoint(request, plan);
  return plan;
}

NodeSpec scheduler_spec(const LaunchPlan& plan) {
  NodeSpec n{"scheduler", "scheduler",
                  {(plan.bin_dir / "pstrain-scheduler").string(), "--config", plan.config_file().string(),
                   "--endpoint-file", plan.endpoint_file().string(), "--failures-file",
                   plan.failures_file().string(), "--exits-file", plan.exits_file().string(), "--ctl-file",
                   plan.ctl_file().string()}};
  // A resumed elastic job's scheduler expects the checkpoint's members (common/checkpoint/checkpoint_members.h).
  if (!plan.resume_dir.empty()) n.argv.insert(n.argv.end(), {"--resume", plan.resume_dir.string()});
  return n;
}

bool LaunchPlan::remote(const std::string& host) const { return !host.empty() && !is_this_machine(host); }

std::vector<int> LaunchPlan::worker_ranks() const {
  if (!resume_workers.empty() && !resume_dir.empty()) return resume_workers;
  std::vector<int> ranks;
  for (int w = 0; w < num_workers; ++w) ranks.push_back(w);
  return ranks;
}

std::string LaunchPlan::worker_host(int rank) const {
  const std::vector<std::string>& hosts = config.cluster.worker_hosts;
  return rank >= 0 && static_cast<std::size_t>(rank) < hosts.size() ? hosts[static_cast<std::size_t>(rank)] : "";
}

std::vector<NodeSpec> node_specs(const LaunchPlan& plan, const std::string& scheduler_endpoint,
                                 const std::vector<std::string>& extra_args) {
  // Other hosts dial the scheduler by the configured name and the port it got.
  std::string remote_endpoint = scheduler_endpoint;
  if (const auto address = parse_endpoint(scheduler_endpoint); !plan.scheduler_host.empty() && address && address->is_tcp()) {
    remote_endpoint = tcp_endpoint(plan.scheduler_host, address->port);
  }
  std::map<std::string, std::string> env;
  for (const char* name : {kJobStartEnv, kLauncherEnv}) {
    if (const char* value = std::getenv(name)) env[name] = value;
  }
  const auto spec = [&](const std::string& role, int rank, const std::string& host, const char* program) {
    NodeSpec n{role + " " + std::to_string(rank), role + "-" + std::to_string(rank), {}};
    const auto with_extra = [&](std::vector<std::string> argv) {
      argv.insert(argv.end(), extra_args.begin(), extra_args.end());
      return argv;
    };
    if (!plan.remote(host)) {
      n.argv = with_extra(node_argv(plan, program, scheduler_endpoint, rank));
    } else {
      n.argv = ssh_argv(plan.ssh_command, host,
                        remote_command(plan.work_dir.string(), env,
                                       with_extra(node_argv(plan, program, remote_endpoint, rank))));
      n.stdin_pipe = true;
    }
    return n;
  };
  std::vector<NodeSpec> specs;
  const std::vector<std::string>& server_hosts = plan.config.cluster.server_hosts;
  for (int s = 0; s < plan.num_servers; ++s) {
    specs.push_back(spec("server", s, server_hosts.empty() ? "" : server_hosts.at(static_cast<std::size_t>(s)),
                         "pstrain-server"));
  }
  for (const int w : plan.worker_ranks()) specs.push_back(spec("worker", w, plan.worker_host(w), "pstrain-worker"));
  return specs;
}

}  // namespace pstrain::launcher
