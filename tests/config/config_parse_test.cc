// parse_config / load_config / to_toml: defaults, every key read into its
// field, exact round trips, files, and the example in docs/config.md.
#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/config/config.h"
#include "common/base/errors.h"
#include "tests/support/temp_dir.h"

namespace pstrain {
namespace {

// A config with every field away from its default.
RunConfig everything_set() {
  RunConfig c;
  c.source_path = "all.toml";
  c.mode = Mode::kAsync;
  c.cluster = {.scheduler = "tcp://10.0.0.1:7000",
               .transport = "ipc",
               .num_servers = 3,
               .num_workers = 4,
               .server_hosts = {"s0", "s1", "s2"},
               .worker_hosts = {"w0", "w1", "w2", "w3"},
               .server_port = 9000,
               .heartbeat_interval_ms = 250,
               .heartbeat_timeout_ms = 3000,
               .timeout_ms = 60000,
               .max_message_bytes = std::int64_t{3} << 30};
  c.ps.partition_bytes = 4096;
  c.workload = {.model = "small_cnn",
                .dataset = "synthetic",
                .data_path = "/data/x \"quoted\"\\dir\ttab",
                .batch_size = 32,
                .epochs = 7,
                .max_steps = 12345678901,
                .seed = 9223372036854775807ULL,
                .device = "cuda",
                .threads = 3,
                .synthetic_train = 100,
                .synthetic_test = 50,
                .straggler_rank = 2,
                .straggler_slowdown = 2.5,
                .simulated_step_ms = 0.1 + 0.2,
                .on_nonfinite = "skip",
                .max_skipped_steps = 4};
  c.optimizer = {.name = "adam",
                 .lr = 1.0 / 3.0,
                 .momentum = 0.0,
                 .weight_decay = 5e-4,
                 .nesterov = false,
                 .beta1 = 0.8,
                 .beta2 = 0.99,
                 .epsilon = 1e-12};
  c.schedule = {.decay = "step",
                .warmup_epochs = 0.5,
                .step_epochs = {1, 2.5, 30},
                .gamma = 0.2,
                .min_lr = 1e-5,
                .linear_scaling = true,
                .base_batch = 128};
  c.collective = {.backend = "nccl", .bucket_bytes = 1 << 20};
  c.output = {.run_dir = "runs/é x", .log_level = "debug"};
  return c;
}

TEST_CASE("an empty file gives the struct defaults") {
  RunConfig expected;
  expected.source_path = "empty.toml";
  CHECK(parse_config("", "empty.toml") == expected);
  CHECK(parse_config("# only a comment\n", "empty.toml") == expected);
}

TEST_CASE("every key is read into its field") {
  const RunConfig c = parse_config(R"(
mode = "allreduce"
[cluster]
scheduler = "ipc:///tmp/sched"
transport = "ipc"
servers = 0
workers = 3
worker_hosts = ["a", "b", "c"]
server_port = 5555
heartbeat_interval_ms = 100
heartbeat_timeout_ms = 1000
timeout_ms = 5000
max_message_bytes = 65536
[ps]
partition_bytes = 8192
[workload]
model = "small_cnn"
dataset = "mnist"
data_path = "/d"
batch_size = 16
epochs = 2
max_steps = 10
seed = 42
device = "cpu"
threads = 2
synthetic_train = 10
synthetic_test = 5
straggler_rank = 0
straggler_slowdown = 3
simulated_step_ms = 1.5
on_nonfinite = "skip"
max_skipped_steps = 3
[optimizer]
name = "sgd"
lr = 0.05
momentum = 0.5
weight_decay = 0.001
nesterov = true
beta1 = 0.5
beta2 = 0.6
epsilon = 1e-6
[schedule]
decay = "cosine"
warmup_epochs = 1
step_epochs = [3, 4]
gamma = 0.5
min_lr = 0.001
linear_scaling = true
base_batch = 64
[collective]
backend = "gloo"
bucket_bytes = 1024
[output]
run_dir = "runs/x"
log_level = "warn"
)",
                                   "full.toml");
  CHECK(c.source_path == "full.toml");
  CHECK(c.mode == Mode::kAllreduce);
  CHECK(c.cluster.scheduler == "ipc:///tmp/sched");
  CHECK(c.cluster.transport == "ipc");
  CHECK(c.cluster.num_servers == 0);
  CHECK(c.cluster.num_workers == 3);
  CHECK(c.cluster.worker_hosts == std::vector<std::string>{"a", "b", "c"});
  CHECK(c.cluster.server_hosts.empty());
  CHECK(c.cluster.server_port == 5555);
  CHECK(c.cluster.heartbeat_interval_ms == 100);
  CHECK(c.cluster.heartbeat_timeout_ms == 1000);
  CHECK(c.cluster.timeout_ms == 5000);
  CHECK(c.cluster.max_message_bytes == 65536);
  CHECK(c.ps.partition_bytes == 8192);
  CHECK(c.workload.model == "small_cnn");
  CHECK(c.workload.dataset == "mnist");
  CHECK(c.workload.data_path == "/d");
  CHECK(c.workload.batch_size == 16);
  CHECK(c.workload.epochs == 2);
  CHECK(c.workload.max_steps == 10);
  CHECK(c.workload.seed == 42);
  CHECK(c.workload.device == "cpu");
  CHECK(c.workload.threads == 2);
  CHECK(c.workload.synthetic_train == 10);
  CHECK(c.workload.synthetic_test == 5);
  CHECK(c.workload.straggler_rank == 0);
  CHECK(c.workload.straggler_slowdown == 3.0);
  CHECK(c.workload.simulated_step_ms == 1.5);
  CHECK(c.workload.on_nonfinite == "skip");
  CHECK(c.workload.max_skipped_steps == 3);
  CHECK(c.optimizer.name == "sgd");
  CHECK(c.optimizer.lr == 0.05);
  CHECK(c.optimizer.momentum == 0.5);
  CHECK(c.optimizer.weight_decay == 0.001);
  CHECK(c.optimizer.nesterov);
  CHECK(c.optimizer.beta1 == 0.5);
  CHECK(c.optimizer.beta2 == 0.6);
  CHECK(c.optimizer.epsilon == 1e-6);
  CHECK(c.schedule.decay == "cosine");
  CHECK(c.schedule.warmup_epochs == 1.0);
  CHECK(c.schedule.step_epochs == std::vector<double>{3.0, 4.0});
  CHECK(c.schedule.gamma == 0.5);
  CHECK(c.schedule.min_lr == 0.001);
  CHECK(c.schedule.linear_scaling);
  CHECK(c.schedule.base_batch == 64);
  CHECK(c.collective.backend == "gloo");
  CHECK(c.collective.bucket_bytes == 1024);
  CHECK(c.output.run_dir == "runs/x");
  CHECK(c.output.log_level == "warn");
}

TEST_CASE("to_toml round-trips exactly") {
  RunConfig defaults;
  defaults.source_path = "d.toml";
  CHECK(parse_config(to_toml(defaults), "d.toml") == defaults);
  const RunConfig all = everything_set();
  const std::string text = to_toml(all);
  CAPTURE(text);
  CHECK(parse_config(text, "all.toml") == all);
  CHECK(to_toml(parse_config(text, "all.toml")) == text);
}

TEST_CASE("to_toml writes one line per key under section headers") {
  const std::string text = to_toml(everything_set());
  CHECK(text.starts_with("# pstrain run config, fully resolved from \"all.toml\"\nmode = \"async\"\n"));
  CHECK(text.find("\n[cluster]\nscheduler = \"tcp://10.0.0.1:7000\"\n") != std::string::npos);
  CHECK(text.find("\nserver_hosts = [\"s0\", \"s1\", \"s2\"]\n") != std::string::npos);
  CHECK(text.find("\nlr = 0.3333333333333333\n") != std::string::npos);
  CHECK(text.find("\nepsilon = 1e-12\n") != std::string::npos);
  CHECK(text.find("\nstep_epochs = [1.0, 2.5, 30.0]\n") != std::string::npos);
  CHECK(text.find("\ndata_path = \"/data/x \\\"quoted\\\"\\\\dir\\u0009tab\"\n") != std::string::npos);
  CHECK(text.find("\nlinear_scaling = true\n") != std::string::npos);
}

TEST_CASE("to_string(Mode)") {
  CHECK(to_string(Mode::kSync) == "sync");
  CHECK(to_string(Mode::kAsync) == "async");
  CHECK(to_string(Mode::kAllreduce) == "allreduce");
}

TEST_CASE("failure policies: read from their TOML names into enums, written back the same, bare in --set") {
  const RunConfig d;
  CHECK(d.cluster.on_worker_failure == WorkerFailurePolicy::kAbort);
  CHECK(d.cluster.on_server_failure == ServerFailurePolicy::kAbort);
  const RunConfig c = parse_config(
      "[cluster]\non_worker_failure = \"continue\"\non_server_failure = \"restart\"\n[checkpoint]\ninterval_steps = 5",
      "p.toml");
  CHECK(c.cluster.on_worker_failure == WorkerFailurePolicy::kContinue);
  CHECK(c.cluster.on_server_failure == ServerFailurePolicy::kRestart);
  const std::string text = to_toml(c);
  CHECK(text.find("\non_worker_failure = \"continue\"\n") != std::string::npos);
  CHECK(text.find("\non_server_failure = \"restart\"\n") != std::string::npos);
  RunConfig o;
  apply_overrides(o, std::vector<std::string>{"cluster.on_worker_failure=restart"});
  CHECK(o.cluster.on_worker_failure == WorkerFailurePolicy::kRestart);
  CHECK(drops_failed_workers(WorkerFailurePolicy::kContinue));
  CHECK(drops_failed_workers(WorkerFailurePolicy::kRestart));
  CHECK_FALSE(drops_failed_workers(WorkerFailurePolicy::kAbort));
}

TEST_CASE("parse_enum and to_string are one pair over the same names") {
  for (const std::string_view name : EnumNames<WorkerFailurePolicy>::names) {
    const std::optional<WorkerFailurePolicy> p = parse_enum<WorkerFailurePolicy>(name);
    REQUIRE(p.has_value());
    CHECK(to_string(*p) == name);
  }
  CHECK(to_string(WorkerFailurePolicy::kContinue) == "continue");
  CHECK(to_string(ServerFailurePolicy::kRestart) == "restart");
  CHECK(parse_enum<ServerFailurePolicy>("restart") == ServerFailurePolicy::kRestart);
  CHECK_FALSE(parse_enum<ServerFailurePolicy>("continue").has_value());  // a worker's policy only
  CHECK_FALSE(parse_enum<WorkerFailurePolicy>("Restart").has_value());
}

// A fresh directory under the system temp dir, removed at scope exit.
using pstrain::test::TempDir;

TEST_CASE("load_config reads a file and names it in errors") {
  const TempDir dir;
  const std::string file = (dir.path() / "run.toml").string();
  std::ofstream(file) << "[workload]\nbatch_size = 128\n";
  const RunConfig c = load_config(file);
  CHECK(c.workload.batch_size == 128);
  CHECK(c.source_path == file);

  std::ofstream(file) << "[workload]\n\nbatch_size = 0\n";
  CHECK_THROWS_WITH_AS(load_config(file),
                       (file + ":3: key 'workload.batch_size': expected an integer >= 1, got 0").c_str(),
                       ConfigError);
  const std::string missing = (dir.path() / "missing.toml").string();
  CHECK_THROWS_WITH_AS(load_config(missing),
                       (missing + ": cannot open config file: No such file or directory").c_str(),
                       ConfigError);
  CHECK_THROWS_WITH_AS(load_config(dir.path().string()),
                       (dir.path().string() + ": cannot read config file: Is a directory").c_str(),
                       ConfigError);
}

TEST_CASE("the example in docs/config.md parses and round-trips") {
  const std::string doc_path = std::string(PSTRAIN_SOURCE_DIR) + "/docs/config.md";
  std::ifstream in(doc_path);
  REQUIRE(in.good());
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string doc = buffer.str();
  const auto begin = doc.find("```toml\n");
  REQUIRE(begin != std::string::npos);
  const auto end = doc.find("```", begin + 8);
  REQUIRE(end != std::string::npos);
  const RunConfig c = parse_config(doc.substr(begin + 8, end - begin - 8), "docs/config.md");
  CHECK(c.mode == Mode::kSync);
  CHECK(parse_config(to_toml(c), "docs/config.md") == c);
}

}  // namespace
}  // namespace pstrain
