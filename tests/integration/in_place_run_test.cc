// Updates in place on real servers (server/shard_store.h): real scheduler,
// server and worker processes through `launch`, over the default shm
// transport, where a worker hands each pull reply back once it has copied
// it, so the servers update each chunk in its own buffers. A sync job of one
// worker with Nesterov momentum and weight decay ends with the same weights,
// bit for bit, as allreduce with one worker (the update rules are shared:
// common/math/update_rules.h), and the servers count the updates they made in
// place (metrics/server-R.json in_place_updates).
#include <doctest/doctest.h>

#include <cstring>

#include "tests/integration/launch_test_util.h"
#include "tools/report/json_value.h"
#include "worker/train/checkpoint.h"

namespace {

std::int64_t field(const pstrain::report::JsonValue& v, const char* key) {
  const pstrain::report::JsonValue* f = v.find(key);
  REQUIRE(f != nullptr);
  return f->as_integer(key);
}

it::fs::path train(const it::TempDir& dir, const char* config, const std::string& name, int steps) {
  const auto run = dir.path() / name;
  auto args = it::launch_args(it::kSourceDir / "configs" / config, run);
  for (const std::string& s :
       {std::string("workload.seed=4"), "workload.max_steps=" + std::to_string(steps), std::string("cluster.workers=1"),
        std::string("optimizer.nesterov=true"), std::string("optimizer.weight_decay=0.001"),
        std::string("ps.partition_bytes=65536")}) {
    args.insert(args.end(), {"--set", s});
  }
  args.push_back("--quiet");
  const it::Result r = it::run_launch(args, dir.path());
  INFO(r.output);
  REQUIRE(r.exit.code == 0);
  return run;
}

}  // namespace

TEST_CASE("updates in place: sync with one worker ends with allreduce-of-one's weights, bit for bit") {
  it::TempDir dir;
  const it::fs::path ps = train(dir, "tiny_sync.toml", "sync", 12);
  const it::fs::path ar = train(dir, "tiny_allreduce.toml", "allreduce", 12);
  const std::vector<float> w_ps = pstrain::read_weights(pstrain::weights_path(ps.string()));
  const std::vector<float> w_ar = pstrain::read_weights(pstrain::weights_path(ar.string()));
  REQUIRE_FALSE(w_ps.empty());
  REQUIRE(w_ps.size() == w_ar.size());
  CHECK(std::memcmp(w_ps.data(), w_ar.data(), w_ps.size() * sizeof(float)) == 0);
  std::int64_t updates = 0, in_place = 0;
  for (int s = 0; s < 2; ++s) {
    const auto file = ps / "metrics" / ("server-" + std::to_string(s) + ".json");
    const pstrain::report::JsonValue v = pstrain::report::parse_json(it::read_file(file), file.string());
    updates += field(v, "updates");
    in_place += field(v, "in_place_updates");
  }
  // A chunk's first update may find its initial weights still held by a
  // reply; after that the worker has handed each reply back before it
  // pushes the next step.
  CHECK(updates > 0);
  CHECK(in_place * 2 >= updates);
  it::note("updates in place: " + std::to_string(in_place) + " of " + std::to_string(updates) +
           ", weights identical to allreduce-of-one");
  // Not vacuous: one step more changes the weights.
  const it::fs::path more = train(dir, "tiny_allreduce.toml", "allreduce-13", 13);
  const std::vector<float> w_more = pstrain::read_weights(pstrain::weights_path(more.string()));
  CHECK(std::memcmp(w_ps.data(), w_more.data(), w_ps.size() * sizeof(float)) != 0);
}
