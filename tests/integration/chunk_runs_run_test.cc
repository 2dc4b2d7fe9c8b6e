// Several chunks per message (kPushChunks, kPullChunks) with real scheduler,
// server and worker processes through `launch`: a sync job's workers send
// their consecutive chunks of one server as runs (the servers count them in
// metrics/server-R.json: run_requests, run_chunks), and the weights are the
// same bits whether the chunks sit on one server (every pull one run) or are
// spread over three (shorter runs, more single-chunk messages).
#include <doctest/doctest.h>

#include <cstring>

#include "tests/integration/launch_test_util.h"
#include "tools/report/json_value.h"
#include "worker/train/checkpoint.h"

namespace {

struct Run {
  std::vector<float> weights;
  std::int64_t run_requests = 0, run_chunks = 0;
};

std::int64_t field(const pstrain::report::JsonValue& v, const char* key) {
  const pstrain::report::JsonValue* f = v.find(key);
  REQUIRE(f != nullptr);
  return f->as_integer(key);
}

Run train(const it::TempDir& dir, int servers) {
  const auto run = dir.path() / ("servers-" + std::to_string(servers));
  auto args = it::launch_args(it::kSourceDir / "configs" / "tiny_sync.toml", run);
  for (const std::string& s : {std::string("workload.seed=3"), std::string("workload.max_steps=10"),
                               std::string("workload.batch_size=16"), std::string("ps.partition_bytes=4096"),
                               "cluster.servers=" + std::to_string(servers)}) {
    args.insert(args.end(), {"--set", s});
  }
  args.push_back("--quiet");
  const it::Result r = it::run_launch(args, dir.path());
  INFO(r.output);
  REQUIRE(r.exit.code == 0);
  Run out;
  out.weights = pstrain::read_weights(pstrain::weights_path(run.string()));
  for (int s = 0; s < servers; ++s) {
    const auto file = run / "metrics" / ("server-" + std::to_string(s) + ".json");
    const pstrain::report::JsonValue v = pstrain::report::parse_json(it::read_file(file), file.string());
    out.run_requests += field(v, "run_requests");
    out.run_chunks += field(v, "run_chunks");
  }
  return out;
}

}  // namespace

TEST_CASE("several chunks per message: sync weights are the same bits over 1 and 3 servers, runs counted") {
  it::TempDir dir;
  const Run one = train(dir, 1);
  const Run three = train(dir, 3);
  REQUIRE_FALSE(one.weights.empty());
  REQUIRE(three.weights.size() == one.weights.size());
  CHECK(std::memcmp(three.weights.data(), one.weights.data(), one.weights.size() * sizeof(float)) == 0);
  // One server: each worker's pull of every chunk is runs of up to 64 chunks, each step and at the end.
  CHECK(one.run_requests >= 2 * 10);
  CHECK(one.run_chunks >= 2 * one.run_requests);
  CHECK(three.run_chunks >= 2 * three.run_requests);
  CHECK(one.run_requests < one.run_chunks);
  it::note("several chunks per message: " + std::to_string(one.run_requests) + " runs of " +
           std::to_string(one.run_chunks) + " chunks on 1 server, " + std::to_string(three.run_requests) + " of " +
           std::to_string(three.run_chunks) + " on 3; weights identical");
}
