// Every validation rule of parse_config fed its bad input; the whole error
// text is checked, so file, line, key, expectation and value all count.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "common/config/config.h"
#include "common/base/errors.h"
#include "tests/support/throw_text.h"

namespace pstrain {
namespace {

struct BadCase {
  std::string toml;
  std::string message;
};

std::string error_of(const std::string& toml) {
  return pstrain::test::thrown_text<ConfigError>([&] { parse_config(toml, "bad.toml"); });
}

void check_cases(const std::vector<BadCase>& cases) {
  for (const BadCase& c : cases) {
    CAPTURE(c.toml);
    CHECK(error_of(c.toml) == c.message);
  }
}

TEST_CASE("per-key ranges, enums and shapes are enforced with file:line and key") {
  check_cases({
      {"# comment\nmode = \"syncc\"",
       "bad.toml:2: key 'mode': expected one of \"sync\", \"async\", \"ssp\", \"allreduce\", got \"syncc\""},
      {"[cluster]\nscheduler = \"http://h:1\"",
       "bad.toml:2: key 'cluster.scheduler': expected an endpoint \"tcp://HOST:PORT\" or "
       "\"ipc://PATH\", got \"http://h:1\""},
      {"[cluster]\nscheduler = \"tcp://host\"",
       "bad.toml:2: key 'cluster.scheduler': expected an endpoint \"tcp://HOST:PORT\" or "
       "\"ipc://PATH\", got \"tcp://host\""},
      {"[cluster]\nscheduler = \"tcp://h:70000\"",
       "bad.toml:2: key 'cluster.scheduler': expected an endpoint \"tcp://HOST:PORT\" or "
       "\"ipc://PATH\", got \"tcp://h:70000\""},
      {"[cluster]\ntransport = \"udp\"",
       "bad.toml:2: key 'cluster.transport': expected one of \"tcp\", \"ipc\", \"shm\", got \"udp\""},
      {"[cluster]\nservers = -1", "bad.toml:2: key 'cluster.servers': expected an integer >= 0, got -1"},
      {"[cluster]\nworkers = 0", "bad.toml:2: key 'cluster.workers': expected an integer >= 1, got 0"},
      {"[cluster]\nservers = 2\nserver_hosts = [\"a\",\n  \"\"]",
       "bad.toml:4: key 'cluster.server_hosts[1]': expected a non-empty string, got \"\""},
      {"[cluster]\nserver_hosts = \"a\"",
       "bad.toml:2: key 'cluster.server_hosts': expected an array of non-empty strings, got a string \"a\""},
      {"[cluster]\nworker_hosts = [\"a\", 1]",
       "bad.toml:2: key 'cluster.worker_hosts[1]': expected a non-empty string, got an integer 1"},
      {"[cluster]\nserver_port = 65536",
       "bad.toml:2: key 'cluster.server_port': expected an integer in [0, 65535], got 65536"},
      {"[cluster]\nserver_port = -1",
       "bad.toml:2: key 'cluster.server_port': expected an integer in [0, 65535], got -1"},
      {"[cluster]\nheartbeat_interval_ms = 0",
       "bad.toml:2: key 'cluster.heartbeat_interval_ms': expected an integer >= 1, got 0"},
      {"[cluster]\nheartbeat_timeout_ms = 0",
       "bad.toml:2: key 'cluster.heartbeat_timeout_ms': expected an integer >= 1, got 0"},
      {"[cluster]\ntimeout_ms = 0", "bad.toml:2: key 'cluster.timeout_ms': expected an integer >= 1, got 0"},
      {"[cluster]\nmax_message_bytes = 0",
       "bad.toml:2: key 'cluster.max_message_bytes': expected an integer >= 1, got 0"},
      {"[cluster]\nmemory_budget_mb = -1",
       "bad.toml:2: key 'cluster.memory_budget_mb': expected an integer in [0, 1048576], got -1"},
      {"[ps]\npartition_bytes = 6",
       "bad.toml:2: key 'ps.partition_bytes': expected an integer >= 4 and a multiple of 4, got 6"},
      {"[ps]\npartition_bytes = 0",
       "bad.toml:2: key 'ps.partition_bytes': expected an integer >= 4 and a multiple of 4, got 0"},
      {"[workload]\nmodel = \"\"", "bad.toml:2: key 'workload.model': expected a non-empty string, got \"\""},
      {"[workload]\ndataset = \"imagenet\"",
       "bad.toml:2: key 'workload.dataset': expected one of \"fashion-mnist\", \"mnist\", \"cifar10\", "
       "\"synthetic\", got \"imagenet\""},
      {"[workload]\ndata_path = 3",
       "bad.toml:2: key 'workload.data_path': expected a string, got an integer 3"},
      {"[workload]\nbatch_size = 0",
       "bad.toml:2: key 'workload.batch_size': expected an integer >= 1, got 0"},
      {"[workload]\nbatch_size = 3000000000",
       "bad.toml:2: key 'workload.batch_size': expected an integer >= 1 of at most 2147483647, got "
       "3000000000"},
      {"[workload]\nepochs = 0", "bad.toml:2: key 'workload.epochs': expected an integer >= 1, got 0"},
      {"[workload]\nmax_steps = -1",
       "bad.toml:2: key 'workload.max_steps': expected an integer >= 0, got -1"},
      {"[workload]\nseed = -1", "bad.toml:2: key 'workload.seed': expected an integer >= 0, got -1"},
      {"[workload]\ndevice = \"tpu\"",
       "bad.toml:2: key 'workload.device': expected one of \"auto\", \"cpu\", \"cuda\", got \"tpu\""},
      {"[workload]\nthreads = -1", "bad.toml:2: key 'workload.threads': expected an integer >= 0, got -1"},
      {"[workload]\nsynthetic_train = 0",
       "bad.toml:2: key 'workload.synthetic_train': expected an integer >= 1, got 0"},
      {"[workload]\nsynthetic_test = 0",
       "bad.toml:2: key 'workload.synthetic_test': expected an integer >= 1, got 0"},
      {"[workload]\nstraggler_rank = -2",
       "bad.toml:2: key 'workload.straggler_rank': expected an integer >= -1, got -2"},
      {"[workload]\nstraggler_slowdown = 0.5",
       "bad.toml:2: key 'workload.straggler_slowdown': expected a number >= 1, got 0.5"},
      {"[workload]\nsimulated_step_ms = -1",
       "bad.toml:2: key 'workload.simulated_step_ms': expected a number >= 0, got -1"},
      {"[optimizer]\nname = \"rmsprop\"",
       "bad.toml:2: key 'optimizer.name': expected one of \"sgd\", \"adam\", got \"rmsprop\""},
      {"[optimizer]\nlr = 0", "bad.toml:2: key 'optimizer.lr': expected a number > 0, got 0"},
      {"[optimizer]\nlr = -0.1", "bad.toml:2: key 'optimizer.lr': expected a number > 0, got -0.1"},
      {"[optimizer]\nlr = nan", "bad.toml:2: key 'optimizer.lr': expected a number > 0, got nan"},
      {"[optimizer]\nlr = inf", "bad.toml:2: key 'optimizer.lr': expected a number > 0, got inf"},
      {"[optimizer]\nmomentum = 1.0",
       "bad.toml:2: key 'optimizer.momentum': expected a number in [0, 1), got 1.0"},
      {"[optimizer]\nmomentum = -0.1",
       "bad.toml:2: key 'optimizer.momentum': expected a number in [0, 1), got -0.1"},
      {"[optimizer]\nweight_decay = -1",
       "bad.toml:2: key 'optimizer.weight_decay': expected a number >= 0, got -1"},
      {"[workload]\non_nonfinite = \"ignore\"",
       "bad.toml:2: key 'workload.on_nonfinite': expected one of \"stop\", \"skip\", got \"ignore\""},
      {"[workload]\nprecision = \"fp16\"",
       "bad.toml:2: key 'workload.precision': expected one of \"fp32\", \"tf32\", got \"fp16\""},
      {"[workload]\nmax_skipped_steps = 0",
       "bad.toml:2: key 'workload.max_skipped_steps': expected an integer >= 1, got 0"},
      {"[cluster]\non_worker_failure = \"later\"",
       "bad.toml:2: key 'cluster.on_worker_failure': expected one of \"abort\", \"continue\", \"restart\", got \"later\""},
      {"[cluster]\non_server_failure = \"continue\"",
       "bad.toml:2: key 'cluster.on_server_failure': expected one of \"abort\", \"restart\", got \"continue\""},
      {"[cluster]\nmax_restarts = -1", "bad.toml:2: key 'cluster.max_restarts': expected an integer in [0, 1000], got -1"},
      {"[ps]\nstaleness_bound = -1",
       "bad.toml:2: key 'ps.staleness_bound': expected an integer in [0, 1000000], got -1"},
      {"[optimizer]\nstaleness_rule = \"sqrt\"",
       "bad.toml:2: key 'optimizer.staleness_rule': expected one of \"none\", \"inverse\", got \"sqrt\""},
      {"[workload]\ncuda_graphs = \"on\"",
       "bad.toml:2: key 'workload.cuda_graphs': expected a boolean (true or false), got a string \"on\""},
      {"[optimizer]\nnesterov = \"yes\"",
       "bad.toml:2: key 'optimizer.nesterov': expected a boolean (true or false), got a string \"yes\""},
      {"[optimizer]\nbeta1 = 1", "bad.toml:2: key 'optimizer.beta1': expected a number in [0, 1), got 1"},
      {"[optimizer]\nbeta2 = -0.5",
       "bad.toml:2: key 'optimizer.beta2': expected a number in [0, 1), got -0.5"},
      {"[optimizer]\nepsilon = 0", "bad.toml:2: key 'optimizer.epsilon': expected a number > 0, got 0"},
      {"[schedule]\ndecay = \"linear\"",
       "bad.toml:2: key 'schedule.decay': expected one of \"none\", \"step\", \"cosine\", got \"linear\""},
      {"[schedule]\nwarmup_epochs = -1",
       "bad.toml:2: key 'schedule.warmup_epochs': expected a number >= 0, got -1"},
      {"[schedule]\nstep_epochs = [0]",
       "bad.toml:2: key 'schedule.step_epochs[0]': expected a number > 0, got 0"},
      {"[schedule]\nstep_epochs = [2, 1]",
       "bad.toml:2: key 'schedule.step_epochs[1]': expected a number greater than the previous element (2), "
       "got 1"},
      {"[schedule]\nstep_epochs = 3",
       "bad.toml:2: key 'schedule.step_epochs': expected an array of numbers > 0 in increasing order, got an "
       "integer 3"},
      {"[schedule]\ngamma = 0", "bad.toml:2: key 'schedule.gamma': expected a number in (0, 1], got 0"},
      {"[schedule]\ngamma = 1.5", "bad.toml:2: key 'schedule.gamma': expected a number in (0, 1], got 1.5"},
      {"[schedule]\nmin_lr = -1", "bad.toml:2: key 'schedule.min_lr': expected a number >= 0, got -1"},
      {"[schedule]\nlinear_scaling = 1",
       "bad.toml:2: key 'schedule.linear_scaling': expected a boolean (true or false), got an integer 1"},
      {"[schedule]\nbase_batch = 0",
       "bad.toml:2: key 'schedule.base_batch': expected an integer >= 1, got 0"},
      {"[collective]\nbackend = \"mpi\"",
       "bad.toml:2: key 'collective.backend': expected one of \"auto\", \"gloo\", \"nccl\", got \"mpi\""},
      {"[collective]\nbucket_bytes = 0",
       "bad.toml:2: key 'collective.bucket_bytes': expected an integer >= 1, got 0"},
      {"[output]\nrun_dir = \"\"", "bad.toml:2: key 'output.run_dir': expected a non-empty string, got \"\""},
      {"[output]\nlog_level = \"trace\"",
       "bad.toml:2: key 'output.log_level': expected one of \"debug\", \"info\", \"warn\", \"error\", got "
       "\"trace\""},
      {"[output]\ntrace = \"full\"",
       "bad.toml:2: key 'output.trace': expected one of \"off\", \"steps\", \"all\", got \"full\""},
      {"[output]\nresource_interval_ms = -1",
       "bad.toml:2: key 'output.resource_interval_ms': expected an integer in [0, 3600000], got -1"},
  });
}

TEST_CASE("wrong types are named; an integer is accepted where a float is expected") {
  check_cases({
      {"[workload]\nbatch_size = \"abc\"",
       "bad.toml:2: key 'workload.batch_size': expected an integer >= 1, got a string \"abc\""},
      {"[workload]\nbatch_size = 1.5",
       "bad.toml:2: key 'workload.batch_size': expected an integer >= 1, got a float 1.5"},
      {"[workload]\nbatch_size = [1]",
       "bad.toml:2: key 'workload.batch_size': expected an integer >= 1, got an array [1]"},
      {"[workload]\nseed = 1979-05-27",
       "bad.toml:2: key 'workload.seed': expected an integer >= 0, got a date 1979-05-27"},
      {"[mode]\nx = 1",
       "bad.toml:1: key 'mode': expected one of \"sync\", \"async\", \"ssp\", \"allreduce\", got a table"},
      {"cluster = 3", "bad.toml:1: key 'cluster': expected a table, got an integer 3"},
  });
  const RunConfig config = parse_config("[optimizer]\nlr = 1\n[workload]\nsimulated_step_ms = 5", "ok.toml");
  CHECK(config.optimizer.lr == 1.0);
  CHECK(config.workload.simulated_step_ms == 5.0);
}

TEST_CASE("unknown keys and sections are rejected with the closest known name") {
  check_cases({
      {"[workload]\nbatchsize = 3",
       "bad.toml:2: key 'workload.batchsize': unknown key; did you mean 'workload.batch_size'?"},
      {"[workload]\nsynthetic_tests = 3",  // synthetic_train is near too, but farther
       "bad.toml:2: key 'workload.synthetic_tests': unknown key; did you mean 'workload.synthetic_test'?"},
      {"[cluster]\nbatch_size = 3",
       "bad.toml:2: key 'cluster.batch_size': unknown key; did you mean 'workload.batch_size'?"},
      {"\n\n[worklaod]\nbatch_size = 3",
       "bad.toml:3: key 'worklaod': unknown top-level key; did you mean 'workload'?"},
      {"batch_size = 3",
       "bad.toml:1: key 'batch_size': unknown top-level key; did you mean 'workload.batch_size'?"},
      {"mdoe = \"sync\"", "bad.toml:1: key 'mdoe': unknown top-level key; did you mean 'mode'?"},
      {"[output]\ncolor = true",
       "bad.toml:2: key 'output.color': unknown key; expected one of run_dir, log_level, trace, resource_interval_ms in [output]"},
      {"[workload.extra]\nx = 1",
       "bad.toml:1: key 'workload.extra': unknown key; expected one of model, dataset, data_path, "
       "batch_size, "
       "epochs, max_steps, seed, device, precision, cuda_graphs, threads, synthetic_train, synthetic_test, synthetic_noise, straggler_rank, "
       "straggler_slowdown, simulated_step_ms, on_nonfinite, max_skipped_steps in [workload]"},
      {"zzz = 1",
       "bad.toml:1: key 'zzz': unknown top-level key; expected one of mode, [cluster], [ps], [workload], "
       "[optimizer], [schedule], [collective], [output], [security], [checkpoint] at the top level"},
  });
}

TEST_CASE("TOML syntax errors keep toml++'s line and column") {
  const std::string message = error_of("mode = \"sync\"\n[cluster]\nservers = = 3\n");
  CHECK(message.starts_with("bad.toml:3:"));
  CHECK(message.find("invalid TOML: ") != std::string::npos);
  const std::string duplicate = error_of("[ps]\npartition_bytes = 4\npartition_bytes = 8\n");
  CHECK(duplicate.starts_with("bad.toml:3:"));
  CHECK(duplicate.find("invalid TOML: ") != std::string::npos);
}

TEST_CASE("rules between keys name the key and where it was set") {
  check_cases({
      {"mode = \"sync\"\n[cluster]\nservers = 0",
       "bad.toml:3: key 'cluster.servers': expected an integer >= 1 when mode is \"sync\" (0 only with "
       "\"allreduce\"), got 0"},
      {"[cluster]\nservers = 3\nserver_hosts = [\"a\", \"b\"]",
       "bad.toml:3: key 'cluster.server_hosts': expected 3 hosts (one per server, cluster.servers), got 2"},
      {"[cluster]\nworker_hosts = [\"a\"]",
       "bad.toml:2: key 'cluster.worker_hosts': expected 2 hosts (one per worker, cluster.workers), got 1"},
      {"[cluster]\nheartbeat_interval_ms = 20000",
       "bad.toml:2: key 'cluster.heartbeat_timeout_ms': expected more than cluster.heartbeat_interval_ms "
       "(20000), got 10000"},
      {"[cluster]\nmax_message_bytes = 1000\n[ps]\npartition_bytes = 4096",
       "bad.toml:4: key 'ps.partition_bytes': expected at most cluster.max_message_bytes (1000), got 4096"},
      {"[workload]\nstraggler_rank = 2",
       "bad.toml:2: key 'workload.straggler_rank': expected -1 (none) or a rank below cluster.workers (2), "
       "got 2"},
      {"[cluster]\nworkers = 2\nmin_workers = 3",
       "bad.toml:3: key 'cluster.min_workers': expected at most cluster.workers (2; 0 = cluster.workers), got 3"},
      {"[cluster]\nworkers = 3\nmax_workers = 2",
       "bad.toml:3: key 'cluster.max_workers': expected at least cluster.workers (3; 0 = cluster.workers), got 2"},
      {"[cluster]\nworker_hosts = [\"a\", \"b\"]\nmax_workers = 4",
       "bad.toml:3: key 'cluster.max_workers': expected 0 or cluster.workers (2) when cluster.worker_hosts is "
       "given (a host per slot is not supported yet), got 4"},
      {"[workload]\n\ndata_path = \"\"",
       "bad.toml:3: key 'workload.data_path': expected a directory for dataset \"fashion-mnist\", got \"\""},
      {"[optimizer]\nmomentum = 0\nnesterov = true",
       "bad.toml:3: key 'optimizer.nesterov': expected false when optimizer.momentum is 0 (Nesterov needs "
       "momentum), got true"},
      {"[optimizer]\nlr = 0.1\n[schedule]\nmin_lr = 0.5",
       "bad.toml:4: key 'schedule.min_lr': expected at most optimizer.lr (0.1), got 0.5"},
      {"mode = \"sync\"\n[optimizer]\nstaleness_rule = \"inverse\"",
       "bad.toml:3: key 'optimizer.staleness_rule': expected \"none\" when mode is \"sync\" (pushes are stale "
       "only in \"async\" and \"ssp\"), got \"inverse\""},
      {"[cluster]\non_server_failure = \"restart\"",
       "bad.toml:2: key 'cluster.on_server_failure': expected \"abort\" when checkpoint.interval_steps is 0 (a "
       "restarted server reloads its shards from the newest checkpoint), got \"restart\""},
      {"mode = \"allreduce\"\n[cluster]\non_server_failure = \"restart\"\n[checkpoint]\ninterval_steps = 5",
       "bad.toml:3: key 'cluster.on_server_failure': expected \"abort\" when mode is \"allreduce\" (no servers), "
       "got \"restart\""},
      {"[workload]\ndevice = \"cpu\"\n[collective]\nbackend = \"nccl\"",
       "bad.toml:4: key 'collective.backend': expected \"auto\" or \"gloo\" when workload.device is \"cpu\", "
       "got \"nccl\""},
  });
}

TEST_CASE("cluster.min_workers and max_workers default to cluster.workers") {
  const RunConfig fixed = parse_config("[cluster]\nworkers = 3", "ok.toml");
  CHECK(min_workers(fixed.cluster) == 3);
  CHECK(max_workers(fixed.cluster) == 3);
  CHECK_FALSE(is_elastic(fixed.cluster));
  const RunConfig elastic = parse_config("[cluster]\nworkers = 2\nmin_workers = 1\nmax_workers = 4", "ok.toml");
  CHECK(min_workers(elastic.cluster) == 1);
  CHECK(max_workers(elastic.cluster) == 4);
  CHECK(is_elastic(elastic.cluster));
  check_cases({{"[cluster]\nmin_workers = -1",
                "bad.toml:2: key 'cluster.min_workers': expected an integer in [0, 1048576], got -1"}});
}

TEST_CASE("the exceptions of the rules between keys are accepted") {
  const RunConfig allreduce = parse_config("mode = \"allreduce\"\n[cluster]\nservers = 0", "ok.toml");
  CHECK(allreduce.mode == Mode::kAllreduce);
  CHECK(allreduce.cluster.num_servers == 0);
  const RunConfig synthetic =
      parse_config("[workload]\ndataset = \"synthetic\"\ndata_path = \"\"\nstraggler_rank = 1", "ok.toml");
  CHECK(synthetic.workload.data_path.empty());
  CHECK(synthetic.workload.straggler_rank == 1);
  const RunConfig adam =
      parse_config("[optimizer]\nname = \"adam\"\nmomentum = 0\nnesterov = true", "ok.toml");
  CHECK(adam.optimizer.nesterov);
  const RunConfig ssp =
      parse_config("mode = \"ssp\"\n[ps]\nstaleness_bound = 0\n[optimizer]\nstaleness_rule = \"inverse\"", "ok.toml");
  CHECK(ssp.mode == Mode::kSsp);
  CHECK(ssp.ps.staleness_bound == 0);
  CHECK(ssp.optimizer.staleness_rule == "inverse");
  CHECK(to_string(Mode::kSsp) == "ssp");
}

}  // namespace
}  // namespace pstrain

TEST_CASE("a config with a NUL byte is refused at its line, before the TOML parser sees it") {
  const std::string text = std::string("mode = \"sync\"\n[<") + '\0' + "ps]\n";
  std::string what;
  try {
    pstrain::parse_config(text, "nul.toml");
  } catch (const pstrain::ConfigError& e) {
    what = e.what();
  }
  CHECK(what == "nul.toml:2: invalid TOML: a NUL byte (not a text file?)");
}
