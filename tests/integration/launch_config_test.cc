// A bad config or flag stops `launch` before it starts anything: exit code 3,
// a message naming the file (or flag), the line and the key, and no run dir.
#include <doctest/doctest.h>

#include "tests/integration/launch_test_util.h"

namespace {

// Writes `toml` to DIR/bad.toml, launches it, and checks that nothing started.
it::Result launch_bad(const it::TempDir& dir, const std::string& toml, const std::vector<std::string>& extra = {},
                      const it::fs::path& bin_dir = it::kBinDir) {
  const auto config = dir.path() / "bad.toml";
  it::write_file(config, toml);
  const auto run = dir.path() / "run";
  auto args = it::launch_args(config, run, bin_dir);
  args.insert(args.end(), extra.begin(), extra.end());
  it::Result r = it::run_launch(args, dir.path(), std::chrono::seconds(60));
  CHECK_FALSE(it::fs::exists(run));  // not even the run directory
  CHECK_FALSE(it::contains(r.output, " scheduler] "));  // nothing started, nothing echoed
  return r;
}

}  // namespace

TEST_CASE("an unknown key is reported with file, line and key before anything starts") {
  it::TempDir dir;
  const auto r = launch_bad(dir, "mode = \"sync\"\n\n[workload]\nbatchsize = 32\n");
  INFO(r.output);
  CHECK(r.exit.code == 3);
  CHECK(it::contains(r.output, (dir.path() / "bad.toml").string() + ":4: key 'workload.batchsize': unknown key"));
}

TEST_CASE("a value of the wrong type is reported with file, line and key") {
  it::TempDir dir;
  const auto r = launch_bad(dir, "[cluster]\nworkers = 2\n[workload]\ndataset = \"synthetic\"\nepochs = \"two\"\n");
  INFO(r.output);
  CHECK(r.exit.code == 3);
  CHECK(it::contains(r.output, (dir.path() / "bad.toml").string() + ":5: key 'workload.epochs': expected an integer"));
}

TEST_CASE("a missing dataset directory is reported with file, line, key and path") {
  it::TempDir dir;
  const auto r = launch_bad(dir, "[workload]\ndataset = \"fashion-mnist\"\ndata_path = \"/no/such/fmnist\"\n");
  INFO(r.output);
  CHECK(r.exit.code == 3);
  CHECK(it::contains(r.output, (dir.path() / "bad.toml").string() +
                                   ":3: key 'workload.data_path': dataset directory '/no/such/fmnist' does not exist"));
}

TEST_CASE("a missing dataset directory given by --set names the flag") {
  it::TempDir dir;
  const auto r = launch_bad(dir, "[workload]\ndataset = \"mnist\"\n", {"--set", "workload.data_path=/no/such/mnist"});
  INFO(r.output);
  CHECK(r.exit.code == 3);
  CHECK(it::contains(r.output, "--set workload.data_path=/no/such/mnist: key 'workload.data_path': dataset directory "
                               "'/no/such/mnist' does not exist (workload.dataset = \"mnist\")"));
}

TEST_CASE("a dataset path that is a file, not a directory, is an error") {
  it::TempDir dir;
  it::write_file(dir.path() / "not-a-dir", "x");
  const auto r = launch_bad(dir, "[workload]\ndataset = \"mnist\"\ndata_path = \"" + (dir.path() / "not-a-dir").string() + "\"\n");
  INFO(r.output);
  CHECK(r.exit.code == 3);
  CHECK(it::contains(r.output, ":3: key 'workload.data_path': dataset directory '" +
                                   (dir.path() / "not-a-dir").string() + "' is not a directory"));
}

TEST_CASE("a bad --set override names the flag and key") {
  it::TempDir dir;
  const auto r = launch_bad(dir, "mode = \"sync\"\n", {"--set", "workload.batch_size=abc"});
  INFO(r.output);
  CHECK(r.exit.code == 3);
  CHECK(it::contains(r.output, "--set workload.batch_size=abc: key 'workload.batch_size': expected an integer"));
}

TEST_CASE("nodes on other hosts need a scheduler and servers the other hosts can dial") {
  it::TempDir dir;
  // The default scheduler is on loopback: hosts elsewhere could never reach it.
  auto r = launch_bad(dir, "[cluster]\nservers = 2\nserver_hosts = [\"localhost\", \"node-that-is-not-here\"]\n");
  INFO(r.output);
  CHECK(r.exit.code == 3);
  CHECK(it::contains(r.output, "key 'cluster.scheduler': 'tcp://127.0.0.1:0' cannot be dialed from the other hosts"));
  // Workers elsewhere with servers on this machine's loopback.
  r = launch_bad(dir, "[cluster]\nscheduler = \"tcp://10.1.2.3:0\"\nworkers = 2\nworker_hosts = [\"localhost\", \"elsewhere\"]\n");
  CHECK(r.exit.code == 3);
  CHECK(it::contains(r.output, ":4: key 'cluster.worker_hosts': workers on other hosts need cluster.server_hosts too"));
  // An ssh program that is not there.
  r = launch_bad(dir, "[cluster]\nscheduler = \"tcp://10.1.2.3:0\"\nservers = 2\nserver_hosts = [\"localhost\", \"elsewhere\"]\n",
                 {"--ssh", "no-such-ssh-program -p 22"});
  CHECK(r.exit.code == 3);
  CHECK(it::contains(r.output, "--ssh: 'no-such-ssh-program' is not in PATH"));
}

TEST_CASE("a missing config file or node program is an error before anything starts") {
  it::TempDir dir;
  const auto run = dir.path() / "run";
  const auto missing = it::run_launch(it::launch_args(dir.path() / "absent.toml", run), dir.path(), std::chrono::seconds(60));
  INFO(missing.output);
  CHECK(missing.exit.code == 3);
  CHECK(it::contains(missing.output, (dir.path() / "absent.toml").string() + ": cannot open config file"));

  it::fs::create_directories(dir.path() / "empty-bin");
  const auto r = launch_bad(dir, "[workload]\ndataset = \"synthetic\"\n", {}, dir.path() / "empty-bin");
  INFO(r.output);
  CHECK(r.exit.code == 3);
  CHECK(it::contains(r.output, "bin dir " + (dir.path() / "empty-bin").string() + ": no executable pstrain-scheduler"));
}

TEST_CASE("a bad launch flag is a usage error") {
  it::TempDir dir;
  const auto r = it::run_launch({"--config", "x.toml", "--timeout-s", "-1"}, dir.path(), std::chrono::seconds(60));
  INFO(r.output);
  CHECK(r.exit.code == 3);
  CHECK(it::contains(r.output, "--timeout-s"));
}
