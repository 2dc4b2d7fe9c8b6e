// apply_override: "section.key=value" with the same checks as the file, and
// errors that name the override.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "common/config/config.h"
#include "common/base/errors.h"
#include "tests/support/throw_text.h"

namespace pstrain {
namespace {

std::string override_error(RunConfig& config, const std::string& assignment) {
  return pstrain::test::thrown_text<ConfigError>([&] { apply_override(config, assignment); });
}

TEST_CASE("overrides set values of every type") {
  RunConfig c;
  apply_override(c, "workload.batch_size=128");
  CHECK(c.workload.batch_size == 128);
  apply_override(c, " optimizer.lr = 0.5 ");
  CHECK(c.optimizer.lr == 0.5);
  apply_override(c, "optimizer.lr=1");  // an integer where a float is expected
  CHECK(c.optimizer.lr == 1.0);
  apply_override(c, "optimizer.nesterov=true");
  CHECK(c.optimizer.nesterov);
  CHECK(c.workload.cuda_graphs);  // on unless turned off
  apply_override(c, "workload.cuda_graphs=false");
  CHECK_FALSE(c.workload.cuda_graphs);
  apply_override(c, "workload.seed=7");
  CHECK(c.workload.seed == 7);
  apply_override(c, "cluster.max_message_bytes=4294967296");
  CHECK(c.cluster.max_message_bytes == 4294967296);
  apply_override(c, "schedule.step_epochs=[1, 2.5]");
  CHECK(c.schedule.step_epochs == std::vector<double>{1.0, 2.5});
  apply_override(c, "cluster.server_hosts=[\"h0\", \"h1\"]");
  CHECK(c.cluster.server_hosts == std::vector<std::string>{"h0", "h1"});
}

TEST_CASE("string overrides may be quoted or bare") {
  RunConfig c;
  apply_override(c, "mode=async");
  CHECK(c.mode == Mode::kAsync);
  apply_override(c, "mode=\"allreduce\"");
  CHECK(c.mode == Mode::kAllreduce);
  apply_override(c, "output.run_dir=runs/a b");
  CHECK(c.output.run_dir == "runs/a b");
  apply_override(c, "output.run_dir=2024");  // valid TOML integer, taken as text
  CHECK(c.output.run_dir == "2024");
  apply_override(c, "output.run_dir='lit\\eral'");
  CHECK(c.output.run_dir == "lit\\eral");
  apply_override(c, "cluster.scheduler=tcp://10.1.2.3:5000");
  CHECK(c.cluster.scheduler == "tcp://10.1.2.3:5000");
}

TEST_CASE("bad overrides are rejected naming the override, and leave the config unchanged") {
  RunConfig c;
  const RunConfig before = c;
  CHECK(override_error(c, "workload.batch_size=abc") ==
        "--set workload.batch_size=abc: key 'workload.batch_size': expected an integer >= 1, got abc (not a "
        "TOML value)");
  CHECK(override_error(c, "workload.batch_size=0") ==
        "--set workload.batch_size=0: key 'workload.batch_size': expected an integer >= 1, got 0");
  CHECK(override_error(c, "workload.batch_size=\"8\"") ==
        "--set workload.batch_size=\"8\": key 'workload.batch_size': expected an integer >= 1, got a string "
        "\"8\"");
  CHECK(override_error(c, "workload.batch_size=1\nx=2") ==
        "--set workload.batch_size=1\nx=2: key 'workload.batch_size': expected an integer >= 1, got 1\nx=2 "
        "(not "
        "a TOML value)");
  CHECK(override_error(c, "mode=bogus") ==
        "--set mode=bogus: key 'mode': expected one of \"sync\", \"async\", \"ssp\", \"allreduce\", got \"bogus\"");
  CHECK(override_error(c, "optimizer.momentum=1") ==
        "--set optimizer.momentum=1: key 'optimizer.momentum': expected a number in [0, 1), got 1");
  CHECK(
      override_error(c, "schedule.step_epochs=[3, 1]") ==
      "--set schedule.step_epochs=[3, 1]: key 'schedule.step_epochs[1]': expected a number greater than the "
      "previous element (3), got 1");
  CHECK(override_error(c, "workload.batch_size") ==
        "--set workload.batch_size: expected SECTION.KEY=VALUE, got no '='");
  CHECK(override_error(c, "workload.batchsize=3") ==
        "--set workload.batchsize=3: key 'workload.batchsize': unknown key; did you mean "
        "'workload.batch_size'?");
  CHECK(override_error(c, "batch_size=3") ==
        "--set batch_size=3: key 'batch_size': unknown top-level key; did you mean 'workload.batch_size'?");
  CHECK(override_error(c, "worklaod.batch_size=3") ==
        "--set worklaod.batch_size=3: key 'worklaod.batch_size': unknown top-level key; did you mean "
        "'workload'?");
  CHECK(
      override_error(c, "zzz.batch_size=3") ==
      "--set zzz.batch_size=3: key 'zzz.batch_size': unknown top-level key; expected one of mode, [cluster], "
      "[ps], [workload], [optimizer], [schedule], [collective], [output], [security], [checkpoint] at the top level");
  CHECK(c == before);
}

TEST_CASE("overrides are checked against the rest of the config") {
  RunConfig c;
  apply_override(c, "cluster.server_hosts=[\"a\", \"b\"]");
  const RunConfig before = c;
  CHECK(override_error(c, "cluster.servers=3") ==
        "--set cluster.servers=3: key 'cluster.server_hosts': expected 3 hosts (one per server, "
        "cluster.servers), got 2");
  CHECK(override_error(c, "cluster.servers=0") ==
        "--set cluster.servers=0: key 'cluster.servers': expected an integer >= 1 when mode is \"sync\" (0 "
        "only with \"allreduce\"), got 0");
  CHECK(c == before);
  apply_override(c, "cluster.server_hosts=[]");
  apply_override(c, "mode=allreduce");
  apply_override(c, "cluster.servers=0");
  CHECK(c.cluster.num_servers == 0);
}


TEST_CASE("several overrides are checked together: their order does not matter, a broken rule names its --set") {
  // Each alone breaks a rule between keys; together they are a valid config, in either order.
  for (const std::vector<std::string>& sets :
       {std::vector<std::string>{"cluster.on_server_failure=restart", "checkpoint.interval_steps=4"},
        std::vector<std::string>{"checkpoint.interval_steps=4", "cluster.on_server_failure=restart"},
        std::vector<std::string>{"cluster.servers=0", "mode=allreduce"}}) {
    RunConfig c;
    CHECK_NOTHROW(apply_overrides(c, sets));
  }
  RunConfig c;
  apply_overrides(c, std::vector<std::string>{"cluster.servers=0", "mode=allreduce"});
  CHECK(c.cluster.num_servers == 0);
  CHECK(c.mode == Mode::kAllreduce);
  // A rule still broken once all are set names the --set of the key it is about, and nothing is applied.
  RunConfig d;
  const RunConfig before = d;
  std::string error;
  try {
    apply_overrides(d, std::vector<std::string>{"workload.batch_size=32", "cluster.on_server_failure=restart"});
  } catch (const ConfigError& e) {
    error = e.what();
  }
  CHECK(error.rfind("--set cluster.on_server_failure=restart: key 'cluster.on_server_failure': expected \"abort\" when "
                    "checkpoint.interval_steps is 0", 0) == 0);
  CHECK(d == before);
}

}  // namespace
}  // namespace pstrain
