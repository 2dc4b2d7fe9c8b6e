// The run configuration: one TOML file describes a whole run (cluster,
// workload, mode, optimizer, output). See docs/config.md for the reference.
//
// Parsing rejects unknown keys and wrong types; every error is a ConfigError
// whose text starts with "FILE:LINE: key 'a.b': " and says what was expected.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace pstrain {

enum class Mode { kSync, kAsync, kSsp, kAllreduce };
std::string_view to_string(Mode mode);

// The failure policies (cluster.on_worker_failure, cluster.on_server_failure;
// docs/architecture.md "Failure handling"): parsed once here, compared as
// values everywhere else.
enum class WorkerFailurePolicy { kAbort, kContinue, kRestart };
enum class ServerFailurePolicy { kAbort, kRestart };

// The names a policy has in the TOML text, indexed by the enum's value: the
// one list that parsing, writing, the config's error messages and readers of
// a saved config (tools/report) use.
template <class E>
struct EnumNames;
template <>
struct EnumNames<WorkerFailurePolicy> {
  static constexpr std::array<std::string_view, 3> names{"abort", "continue", "restart"};
};
template <>
struct EnumNames<ServerFailurePolicy> {
  static constexpr std::array<std::string_view, 2> names{"abort", "restart"};
};
template <class E>
concept NamedEnum = std::is_enum_v<E> && requires { EnumNames<E>::names; };

template <NamedEnum E>
constexpr std::string_view to_string(E value) {
  return EnumNames<E>::names[static_cast<std::size_t>(value)];
}
// The value named `name`; nullopt for a name not in EnumNames<E>::names.
template <NamedEnum E>
constexpr std::optional<E> parse_enum(std::string_view name) {
  for (std::size_t i = 0; i < EnumNames<E>::names.size(); ++i) {
    if (EnumNames<E>::names[i] == name) return static_cast<E>(i);
  }
  return std::nullopt;
}

// Whether a failed worker leaves the job and the others go on ("continue",
// and "restart", which drops it until a new process takes its rank back).
constexpr bool drops_failed_workers(WorkerFailurePolicy p) { return p != WorkerFailurePolicy::kAbort; }

struct ClusterConfig {
  // Endpoint of the scheduler. Port 0 means "ephemeral": only for local
  // launches, where the launcher learns the bound port and passes it on.
  std::string scheduler = "tcp://127.0.0.1:0";
  // "shm": servers listen on tcp; a worker and a server on one host move
  // tensors through shared memory (common/transport/shm/shm_transport.h), other pairs over
  // tcp. "tcp": tensors always over the sockets. "ipc": servers listen on
  // ipc:// (one host only), tensors over the sockets.
  std::string transport = "shm";
  int num_servers = 2;
  int num_workers = 2;
  // Elastic membership (docs/architecture.md, "Elastic membership"): the job
  // has worker slots 0..max_workers-1; num_workers of them start, and
  // `pstrain-ctl RUN_DIR workers N` or a worker started with --join may grow
  // it up to max_workers or shrink it down to min_workers. 0 = num_workers
  // (the default: not elastic); min_workers()/max_workers() below resolve it.
  int min_workers = 0;
  int max_workers = 0;
  // Hosts per rank for multi-machine runs; empty means every rank is local.
  // When given, their length must equal num_servers / num_workers.
  std::vector<std::string> server_hosts;
  std::vector<std::string> worker_hosts;
  int server_port = 0;                     // first port; 0 = ephemeral
  int heartbeat_interval_ms = 500;
  int heartbeat_timeout_ms = 10000;        // a node silent this long has failed
  int timeout_ms = 120000;                 // any single blocking wait
  // A worker that fails (silent past heartbeat_timeout_ms, or reports a
  // failure): "abort" ends the job; "continue" drops it and the job goes on
  // with the others; "restart" drops it as "continue" does, and the launcher
  // starts a new process with the same rank (at most max_restarts times per
  // rank), which rejoins at the current step.
  WorkerFailurePolicy on_worker_failure = WorkerFailurePolicy::kAbort;
  // A server that fails: "abort" ends the job; "restart" has the launcher
  // start it again (at most max_restarts times per rank): it reloads its
  // shards from the newest complete checkpoint and takes back its rank, and
  // the workers retry their requests. Needs checkpoint.interval_steps > 0.
  ServerFailurePolicy on_server_failure = ServerFailurePolicy::kAbort;
  int max_restarts = 3;  // per rank, for the "restart" policies
  std::int64_t max_message_bytes = std::int64_t{1} << 30;
  // A server's memory budget for unsent replies across all its connections,
  // in MiB; 0 = derived from its shard and the workers (server/admission.h).
  std::int64_t memory_budget_mb = 0;

  bool operator==(const ClusterConfig&) const = default;
};

// cluster.min_workers / cluster.max_workers with 0 resolved to cluster.workers.
inline int min_workers(const ClusterConfig& cl) { return cl.min_workers > 0 ? cl.min_workers : cl.num_workers; }
inline int max_workers(const ClusterConfig& cl) { return cl.max_workers > 0 ? cl.max_workers : cl.num_workers; }
// Whether the job may change its number of workers while it runs.
inline bool is_elastic(const ClusterConfig& cl) { return min_workers(cl) != max_workers(cl); }

struct PsConfig {
  std::int64_t partition_bytes = std::int64_t{1} << 20;  // chunk size for sharding
  int staleness_bound = 2;      // mode "ssp": how many steps a worker may lead the slowest
  std::string wire_dtype = "float32";  // "float32" | "bfloat16": pushes and pull replies on the wire
  // Threads a server splits each update over (server/parallel_apply.h); 0 =
  // the host's cores shared among the servers on it.
  int apply_threads = 0;
  // The smallest part of an update a thread takes: a chunk below twice this
  // stays on one thread.
  std::int64_t apply_split_bytes = std::int64_t{1} << 17;

  bool operator==(const PsConfig&) const = default;
};

struct OptimizerConfig {
  std::string name = "sgd";     // "sgd" | "adam"
  double lr = 0.01;
  double momentum = 0.9;        // sgd
  double weight_decay = 0.0;    // sgd and adam (L2 added to the gradient)
  bool nesterov = false;        // sgd
  double beta1 = 0.9;           // adam
  double beta2 = 0.999;         // adam
  double epsilon = 1e-8;        // adam
  std::string staleness_rule = "none";  // "none" | "inverse" (async, ssp: lr / staleness)
  bool momentum_correction = true;      // async, ssp: servers use momentum - (1 - 1/W), see optimizer.h

  bool operator==(const OptimizerConfig&) const = default;
};

struct ScheduleConfig {
  std::string decay = "none";   // "none" | "step" | "cosine"
  double warmup_epochs = 0.0;   // linear warmup from 0, see lr_schedule.h
  std::vector<double> step_epochs;  // "step": multiply by gamma at each
  double gamma = 0.1;
  double min_lr = 0.0;          // "cosine" floor
  bool linear_scaling = false;  // lr *= global_batch / base_batch
  int base_batch = 256;

  bool operator==(const ScheduleConfig&) const = default;
};

struct WorkloadConfig {
  std::string model = "fmnist_cnn";       // "fmnist_cnn" | "small_cnn" | ...
  std::string dataset = "fashion-mnist";  // "fashion-mnist" | "mnist" | "cifar10" | "synthetic"
  std::string data_path = "/usr/share/datasets/fashion-mnist";
  int batch_size = 64;                    // per worker
  int epochs = 1;
  std::int64_t max_steps = 0;             // 0 = no limit; else stop after this many steps
  std::uint64_t seed = 1;
  std::string device = "auto";            // "auto" | "cpu" | "cuda"
  // GPU math: "fp32" (plain FP32, close to the CPU reference) or "tf32" (cuBLAS and cuDNN may
  // use TF32 tensor cores: faster, about 10 bits of mantissa in products). The CPU ignores it.
  std::string precision = "fp32";
  // GPU: the single-worker trainer runs each full batch's step (forward, backward, update) as
  // one CUDA graph, captured at the second full step and replayed (worker/nn/cuda/step_graph.h);
  // a last partial batch runs as usual. The CPU ignores it.
  bool cuda_graphs = true;
  int threads = 0;                        // CPU threads per worker; 0 = all cores / workers
  int synthetic_train = 2048;             // "synthetic": sizes of the sets
  int synthetic_test = 512;
  double synthetic_noise = 1.5;           // "synthetic": noise std per pixel; more is harder
  // Experiments (issue 6): slow one worker; replace compute by a fixed time.
  int straggler_rank = -1;
  double straggler_slowdown = 1.0;
  double simulated_step_ms = 0.0;         // > 0: simulated compute
  // A non-finite loss or gradient (issue 10): "stop" ends the job (exit code
  // 4); "skip" drops that step's update and stops after max_skipped_steps
  // skipped steps in a row.
  std::string on_nonfinite = "stop";      // "stop" | "skip"
  int max_skipped_steps = 10;             // >= 1

  bool operator==(const WorkloadConfig&) const = default;
};

struct CollectiveConfig {
  std::string backend = "auto";           // "auto" | "gloo" | "nccl"
  std::int64_t bucket_bytes = std::int64_t{25} << 20;

  bool operator==(const CollectiveConfig&) const = default;
};

struct OutputConfig {
  std::string run_dir = "runs/default";
  std::string log_level = "info";         // "debug" | "info" | "warn" | "error"
  std::string trace = "steps";            // "off" | "steps" | "all": spans into RUN_DIR/trace.json
  int resource_interval_ms = 1000;        // resource samples (CPU, RSS, bytes, GPU); 0 = off

  bool operator==(const OutputConfig&) const = default;
};

// Transport security (README "Security", common/wire/security.h).
struct SecurityConfig {
  std::string mode = "off";               // "off" | "curve": CURVE on every ZeroMQ socket
  // The job's key files (pstrain-keygen DIR). Empty with curve: the launcher
  // generates keys into RUN_DIR/keys and sets this for the nodes.
  std::string key_dir;
  // Mode "off": the job's secret (common/wire/job_secret.h), a file of mode
  // 0600 every node reads to answer the scheduler's challenge at
  // registration. Empty: the file $PSTRAIN_SECRET_FILE names; the launcher
  // writes a fresh one into RUN_DIR/secret and sets this for the nodes.
  std::string secret_file = "";  // a default, so that {mode, key_dir} initializers stay complete

  bool operator==(const SecurityConfig&) const = default;
};

// Periodic checkpoints (common/checkpoint/checkpoint.h; docs/architecture.md "Checkpoints").
struct CheckpointConfig {
  std::int64_t interval_steps = 0;        // a checkpoint after every this many steps; 0 = off
  int keep = 2;                           // complete checkpoints kept (older ones pruned)
  std::string dir;                        // empty = RUN_DIR/checkpoints

  bool operator==(const CheckpointConfig&) const = default;
};

struct RunConfig {
  std::string source_path;                // file it was read from ("" if built in code)
  Mode mode = Mode::kSync;
  ClusterConfig cluster;
  PsConfig ps;
  WorkloadConfig workload;
  OptimizerConfig optimizer;
  ScheduleConfig schedule;
  CollectiveConfig collective;
  OutputConfig output;
  SecurityConfig security;
  CheckpointConfig checkpoint;

  bool operator==(const RunConfig&) const = default;
};

// Parses TOML text; `source_name` is used in error messages.
RunConfig parse_config(std::string_view toml_text, const std::string& source_name);
// Reads and parses a file; a missing file is a ConfigError naming it.
RunConfig load_config(const std::string& path);
// Applies "section.key=value" overrides (from --set flags) with the same checks:
// each key's own rule at once, the rules between keys once all are set (so
// their order does not matter), naming the --set that breaks one.
void apply_override(RunConfig& config, std::string_view assignment);
void apply_overrides(RunConfig& config, std::span<const std::string> assignments);
// Writes the resolved config back as TOML (for the run directory).
std::string to_toml(const RunConfig& config);

}  // namespace pstrain
