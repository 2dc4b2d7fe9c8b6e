// The run-config key table. Adding a key means one line in visit_table()
// plus its member in common/config/config.h; docs/config.md describes each key.
#include "common/config/config_fields.h"

#include <algorithm>
#include <array>

namespace pstrain::config_detail {
namespace {

constexpr std::array<std::string_view, 4> kModes{"sync", "async", "ssp", "allreduce"};
constexpr std::array<std::string_view, 2> kStalenessRules{"none", "inverse"};
constexpr std::array<std::string_view, 2> kNonFinitePolicies{"stop", "skip"};
constexpr std::array<std::string_view, 2> kPrecisions{"fp32", "tf32"};
constexpr std::array<std::string_view, 3> kTransports{"tcp", "ipc", "shm"};
constexpr std::array<std::string_view, 2> kWireDtypes{"float32", "bfloat16"};
constexpr std::array<std::string_view, 4> kDatasets{"fashion-mnist", "mnist", "cifar10", "synthetic"};
constexpr std::array<std::string_view, 3> kDevices{"auto", "cpu", "cuda"};
constexpr std::array<std::string_view, 2> kOptimizers{"sgd", "adam"};
constexpr std::array<std::string_view, 3> kDecays{"none", "step", "cosine"};
constexpr std::array<std::string_view, 3> kBackends{"auto", "gloo", "nccl"};
constexpr std::array<std::string_view, 4> kLogLevels{"debug", "info", "warn", "error"};
constexpr std::array<std::string_view, 3> kTraceLevels{"off", "steps", "all"};
constexpr std::array<std::string_view, 2> kSecurityModes{"off", "curve"};
constexpr std::array<std::string_view, 9> kSections{"cluster",  "ps",     "workload", "optimizer", "schedule",
                                                    "collective", "output", "security", "checkpoint"};

constexpr Rule any() { return Rule{}; }
constexpr Rule at_least(double min) {
  Rule r;
  r.min = min;
  return r;
}
constexpr Rule above(double min) {
  Rule r = at_least(min);
  r.min_open = true;
  return r;
}
constexpr Rule between(double min, double max) {  // [min, max]
  Rule r = at_least(min);
  r.max = max;
  return r;
}
constexpr Rule unit_interval() {  // [0, 1)
  Rule r = between(0, 1);
  r.max_open = true;
  return r;
}
constexpr Rule one_of(Choices choices) {
  Rule r;
  r.choices = choices;
  return r;
}
constexpr Rule non_empty() {
  Rule r;
  r.non_empty = true;
  return r;
}
constexpr Rule endpoint() {
  Rule r;
  r.endpoint = true;
  return r;
}
constexpr Rule positive_fraction() {  // (0, 1]
  Rule r = above(0);
  r.max = 1;
  return r;
}
constexpr Rule positive_multiple_of(std::int64_t factor) {  // factor, 2 * factor, ...
  Rule r = at_least(static_cast<double>(factor));
  r.multiple_of = factor;
  return r;
}

// Calls v(section, key, &member, rule) for every key. C is RunConfig or
// const RunConfig; the member pointer converts to the visitor's variant.
template <class C, class V>
void visit_table(C& c, const V& v) {
  v("", "mode", &c.mode, one_of(kModes));
  auto& cl = c.cluster;
  v("cluster", "scheduler", &cl.scheduler, endpoint());
  v("cluster", "transport", &cl.transport, one_of(kTransports));
  v("cluster", "servers", &cl.num_servers, at_least(0));
  v("cluster", "workers", &cl.num_workers, at_least(1));
  v("cluster", "min_workers", &cl.min_workers, between(0, 1 << 20));
  v("cluster", "max_workers", &cl.max_workers, between(0, 1 << 20));
  v("cluster", "server_hosts", &cl.server_hosts, any());
  v("cluster", "worker_hosts", &cl.worker_hosts, any());
  v("cluster", "server_port", &cl.server_port, between(0, 65535));
  v("cluster", "heartbeat_interval_ms", &cl.heartbeat_interval_ms, at_least(1));
  v("cluster", "heartbeat_timeout_ms", &cl.heartbeat_timeout_ms, at_least(1));
  v("cluster", "timeout_ms", &cl.timeout_ms, at_least(1));
  v("cluster", "on_worker_failure", &cl.on_worker_failure, one_of(EnumNames<WorkerFailurePolicy>::names));
  v("cluster", "on_server_failure", &cl.on_server_failure, one_of(EnumNames<ServerFailurePolicy>::names));
  v("cluster", "max_restarts", &cl.max_restarts, between(0, 1000));
  v("cluster", "max_message_bytes", &cl.max_message_bytes, at_least(1));
  v("cluster", "memory_budget_mb", &cl.memory_budget_mb, between(0, 1 << 20));
  v("ps", "partition_bytes", &c.ps.partition_bytes, positive_multiple_of(4));
  v("ps", "staleness_bound", &c.ps.staleness_bound, between(0, 1000000));
  v("ps", "wire_dtype", &c.ps.wire_dtype, one_of(kWireDtypes));
  v("ps", "apply_threads", &c.ps.apply_threads, between(0, 1024));
  v("ps", "apply_split_bytes", &c.ps.apply_split_bytes, positive_multiple_of(4));
  auto& wl = c.workload;
  v("workload", "model", &wl.model, non_empty());
  v("workload", "dataset", &wl.dataset, one_of(kDatasets));
  v("workload", "data_path", &wl.data_path, any());
  v("workload", "batch_size", &wl.batch_size, at_least(1));
  v("workload", "epochs", &wl.epochs, at_least(1));
  v("workload", "max_steps", &wl.max_steps, at_least(0));
  v("workload", "seed", &wl.seed, at_least(0));
  v("workload", "device", &wl.device, one_of(kDevices));
  v("workload", "precision", &wl.precision, one_of(kPrecisions));
  v("workload", "cuda_graphs", &wl.cuda_graphs, any());
  v("workload", "threads", &wl.threads, at_least(0));
  v("workload", "synthetic_train", &wl.synthetic_train, at_least(1));
  v("workload", "synthetic_test", &wl.synthetic_test, at_least(1));
  v("workload", "synthetic_noise", &wl.synthetic_noise, at_least(0));
  v("workload", "straggler_rank", &wl.straggler_rank, at_least(-1));
  v("workload", "straggler_slowdown", &wl.straggler_slowdown, at_least(1));
  v("workload", "simulated_step_ms", &wl.simulated_step_ms, at_least(0));
  v("workload", "on_nonfinite", &wl.on_nonfinite, one_of(kNonFinitePolicies));
  v("workload", "max_skipped_steps", &wl.max_skipped_steps, at_least(1));
  auto& op = c.optimizer;
  v("optimizer", "name", &op.name, one_of(kOptimizers));
  v("optimizer", "lr", &op.lr, above(0));
  v("optimizer", "momentum", &op.momentum, unit_interval());
  v("optimizer", "weight_decay", &op.weight_decay, at_least(0));
  v("optimizer", "nesterov", &op.nesterov, any());
  v("optimizer", "beta1", &op.beta1, unit_interval());
  v("optimizer", "beta2", &op.beta2, unit_interval());
  v("optimizer", "epsilon", &op.epsilon, above(0));
  v("optimizer", "staleness_rule", &op.staleness_rule, one_of(kStalenessRules));
  v("optimizer", "momentum_correction", &op.momentum_correction, any());
  auto& sc = c.schedule;
  v("schedule", "decay", &sc.decay, one_of(kDecays));
  v("schedule", "warmup_epochs", &sc.warmup_epochs, at_least(0));
  v("schedule", "step_epochs", &sc.step_epochs, above(0));
  v("schedule", "gamma", &sc.gamma, positive_fraction());
  v("schedule", "min_lr", &sc.min_lr, at_least(0));
  v("schedule", "linear_scaling", &sc.linear_scaling, any());
  v("schedule", "base_batch", &sc.base_batch, at_least(1));
  v("collective", "backend", &c.collective.backend, one_of(kBackends));
  v("collective", "bucket_bytes", &c.collective.bucket_bytes, at_least(1));
  v("output", "run_dir", &c.output.run_dir, non_empty());
  v("output", "log_level", &c.output.log_level, one_of(kLogLevels));
  v("output", "trace", &c.output.trace, one_of(kTraceLevels));
  v("output", "resource_interval_ms", &c.output.resource_interval_ms, between(0, 3600000));
  v("security", "mode", &c.security.mode, one_of(kSecurityModes));
  v("security", "key_dir", &c.security.key_dir, any());
  v("security", "secret_file", &c.security.secret_file, any());
  v("checkpoint", "interval_steps", &c.checkpoint.interval_steps, at_least(0));
  v("checkpoint", "keep", &c.checkpoint.keep, at_least(1));
  v("checkpoint", "dir", &c.checkpoint.dir, any());
}

}  // namespace

void visit_fields(RunConfig& config, const FieldVisitor& visitor) { visit_table(config, visitor); }

void visit_fields(const RunConfig& config, const ConstFieldVisitor& visitor) { visit_table(config, visitor); }

Choices section_names() { return kSections; }

bool is_section(std::string_view name) {
  return std::find(kSections.begin(), kSections.end(), name) != kSections.end();
}

}  // namespace pstrain::config_detail
