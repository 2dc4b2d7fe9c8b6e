// Parallel apply on real servers (ps.apply_threads, server/parallel_apply.h):
// real scheduler, server and worker processes through `launch`. A sync job of
// 3 workers (an odd mean, the rank-ordered sum's passes) with Nesterov
// momentum ends with the same weights, bit for bit, whether each server
// splits its updates over 4 threads in parts of 256 bytes or applies them on
// one; the servers say how many threads they used and how many passes they
// split (metrics/server-R.json), and the default is the host's cores shared
// among the servers on it.
#include <doctest/doctest.h>

#include <cstring>
#include <thread>

#include "tests/integration/launch_test_util.h"
#include "tools/report/json_value.h"
#include "worker/train/checkpoint.h"

namespace {

struct Run {
  std::vector<float> weights;
  std::vector<pstrain::report::JsonValue> servers;  // metrics/server-R.json
  std::string server_log;  // logs/server-0.log
};

Run train(const it::TempDir& dir, const std::string& name, const std::vector<std::string>& sets) {
  const auto run = dir.path() / name;
  auto args = it::launch_args(it::kSourceDir / "configs" / "tiny_sync.toml", run);
  std::vector<std::string> all = {"workload.seed=5", "workload.max_steps=12", "cluster.workers=3",
                                  "workload.batch_size=16", "optimizer.nesterov=true", "optimizer.weight_decay=0.001"};
  all.insert(all.end(), sets.begin(), sets.end());
  for (const std::string& s : all) args.insert(args.end(), {"--set", s});
  args.push_back("--quiet");
  const it::Result r = it::run_launch(args, dir.path());
  INFO(r.output);
  REQUIRE(r.exit.code == 0);
  Run out;
  out.server_log = it::read_file(run / "logs" / "server-0.log");
  out.weights = pstrain::read_weights(pstrain::weights_path(run.string()));
  for (int s = 0; s < 2; ++s) {
    const auto file = run / "metrics" / ("server-" + std::to_string(s) + ".json");
    out.servers.push_back(pstrain::report::parse_json(it::read_file(file), file.string()));
  }
  return out;
}

std::int64_t field(const pstrain::report::JsonValue& v, const char* key) {
  const pstrain::report::JsonValue* f = v.find(key);
  REQUIRE(f != nullptr);
  return f->as_integer(key);
}

}  // namespace

TEST_CASE("parallel apply: sync weights are the same bits with 4 apply threads as with 1") {
  it::TempDir dir;
  const Run one = train(dir, "threads-1", {"ps.apply_threads=1"});
  const Run four = train(dir, "threads-4", {"ps.apply_threads=4", "ps.apply_split_bytes=256"});
  REQUIRE_FALSE(one.weights.empty());
  REQUIRE(four.weights.size() == one.weights.size());
  CHECK(std::memcmp(four.weights.data(), one.weights.data(), one.weights.size() * sizeof(float)) == 0);
  std::int64_t split = 0;
  for (int s = 0; s < 2; ++s) {
    CAPTURE(s);
    CHECK(field(one.servers[static_cast<std::size_t>(s)], "apply_threads") == 1);
    CHECK(field(one.servers[static_cast<std::size_t>(s)], "apply_split_runs") == 0);
    CHECK(field(four.servers[static_cast<std::size_t>(s)], "apply_threads") == 4);
    CHECK(field(four.servers[static_cast<std::size_t>(s)], "apply_runs") > 0);
    split += field(four.servers[static_cast<std::size_t>(s)], "apply_split_runs");
  }
  // At least each step's update of a chunk (the sum's passes come on top).
  CHECK(split >= 12);
  it::note("parallel apply: " + std::to_string(split) + " passes split over 4 threads, weights identical");
}

TEST_CASE("parallel apply: by default each server takes the host's cores shared among the servers on it") {
  it::TempDir dir;
  const Run run = train(dir, "default", {});
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int expected = std::max(1, cores / 2);  // tiny_sync: 2 servers, both on this host
  for (int s = 0; s < 2; ++s) {
    CAPTURE(s);
    CHECK(field(run.servers[static_cast<std::size_t>(s)], "apply_threads") == expected);
  }
  CHECK(it::contains(run.server_log, "apply threads: " + std::to_string(expected) + " (ps.apply_threads 0: " +
                                     std::to_string(cores) + " cores, 2 servers on this host)"));
}
