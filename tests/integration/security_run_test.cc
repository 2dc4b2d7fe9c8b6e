// security.mode = "curve" through the launcher: real processes over tcp.
#include <doctest/doctest.h>

#include <sys/stat.h>

#include <string>
#include <vector>

#include "common/config/config.h"
#include "common/base/errors.h"
#include "common/wire/security.h"
#include "tests/integration/launch_test_util.h"

TEST_CASE("a curve job with no key_dir gets fresh keys in RUN_DIR/keys and trains to exit 0") {
  it::TempDir dir;
  const auto run = dir.path() / "curve";
  auto args = it::launch_args(it::kSourceDir / "configs/tiny_sync.toml", run);
  args.insert(args.end(), {"--set", "security.mode=curve", "--quiet"});
  const it::Result r = it::run_launch(args, dir.path());
  INFO(r.output);
  REQUIRE_FALSE(r.exit.signaled);
  CHECK(r.exit.code == 0);
  CHECK(it::contains(r.output, "wrote this run's keys to " + (run / "keys").string()));
  const pstrain::RunConfig config = pstrain::load_config((run / "config.toml").string());
  // One keypair per worker (each worker process used its own), no shared worker key.
  std::vector<std::string> names = {"bind.key", "bind.pub", "server.key", "server.pub"};
  REQUIRE(config.cluster.num_workers >= 2);
  for (int w = 0; w < config.cluster.num_workers; ++w) {
    names.push_back(pstrain::worker_key_name(w) + ".key");
    names.push_back(pstrain::worker_key_name(w) + ".pub");
  }
  for (const std::string& name : names) {
    CAPTURE(name);
    struct stat st{};
    REQUIRE(::stat((run / "keys" / name).c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0600);
  }
  CHECK_FALSE(it::fs::exists(run / "keys" / "worker.key"));
  CHECK(pstrain::read_key_file(run / "keys" / "worker-0.pub", false).public_z85 !=
        pstrain::read_key_file(run / "keys" / "worker-1.pub", false).public_z85);
  CHECK(config.security.mode == "curve");
  CHECK(config.security.key_dir == (run / "keys").string());
  CHECK(it::fs::exists(run / "summary.json"));
}

TEST_CASE("an allreduce job with curve on (store rendezvous over CURVE) exits 0") {
  it::TempDir dir;
  const auto run = dir.path() / "curve-ar";
  auto args = it::launch_args(it::kSourceDir / "configs/tiny_allreduce.toml", run);
  args.insert(args.end(), {"--set", "security.mode=curve", "--quiet"});
  const it::Result r = it::run_launch(args, dir.path());
  INFO(r.output);
  REQUIRE_FALSE(r.exit.signaled);
  CHECK(r.exit.code == 0);
}

TEST_CASE("a curve job whose key_dir lacks a key file is refused before anything starts, naming the file") {
  it::TempDir dir;
  pstrain::write_job_keys(dir.path() / "keys", false);
  it::fs::remove(dir.path() / "keys" / "server.pub");
  const auto run = dir.path() / "refused";
  auto args = it::launch_args(it::kSourceDir / "configs/tiny_sync.toml", run);
  args.insert(args.end(), {"--set", "security.mode=curve", "--set", "security.key_dir=" + (dir.path() / "keys").string()});
  const it::Result r = it::run_launch(args, dir.path());
  INFO(r.output);
  CHECK(r.exit.code == pstrain::kExitConfig);
  CHECK(it::contains(r.output, "--set security.key_dir="));
  CHECK(it::contains(r.output, (dir.path() / "keys" / "server.pub").string() + " does not exist"));
  CHECK_FALSE(it::fs::exists(run / "pids.txt"));
}

TEST_CASE("a node given curve keys the job does not accept never joins: the launch fails, it does not hang") {
  // The workers read another job's keys (same bind key, foreign worker key):
  // the scheduler's ZAP handler refuses them, registration times out.
  it::TempDir dir;
  pstrain::write_job_keys(dir.path() / "keys", false);
  pstrain::write_job_keys(dir.path() / "other", false);
  it::fs::copy_file(dir.path() / "other" / "worker.key", dir.path() / "keys" / "worker.key",
                    it::fs::copy_options::overwrite_existing);
  const auto run = dir.path() / "foreign";
  auto args = it::launch_args(it::kSourceDir / "configs/tiny_sync.toml", run);
  args.insert(args.end(), {"--set", "security.mode=curve", "--set", "security.key_dir=" + (dir.path() / "keys").string(),
                           "--set", "cluster.timeout_ms=3000", "--quiet"});
  const it::Result r = it::run_launch(args, dir.path());
  INFO(r.output);
  CHECK(r.exit.code != 0);
  CHECK(it::contains(it::read_file(run / "summary.json"), "\"partial\": true"));  // a failed run's summary is partial
}
