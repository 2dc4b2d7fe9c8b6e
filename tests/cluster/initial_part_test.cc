// A server's initial part (server/checkpointing.h): written at step 0 once
// every chunk is initialized and refreshed every max(1, interval / 8) steps
// until the first checkpoint, each refresh in a new step-T directory and the
// older removed once it is complete. A refresh cut short (a part without its
// manifest, as a kill between the two leaves it) does not cost the previous
// one: the newest complete part is what a rejoining server reloads. (One
// directory rewritten in place left a part its manifest did not describe,
// and the rejoin found no initial part at all.)
#include <doctest/doctest.h>

#include <filesystem>

#include "common/base/log.h"
#include "common/checkpoint/checkpoint.h"
#include "server/checkpointing.h"
#include "server/shard_store.h"
#include "tests/support/temp_dir.h"

using namespace pstrain;

namespace {

namespace fs = std::filesystem;

struct Job {
  ParamLayout layout;
  ShardMap map;
  StoreOptions options;
  Job() {
    layout.add("w", {8});
    map = ShardMap(layout, 1, 1 << 20);
    options.consistency = ConsistencyOptions{Mode::kSync, 0};
    options.optimizer.name = "sgd";
    options.optimizer.momentum = 0.0;
    options.optimizer.weight_decay = 0.0;
  }
};

std::vector<fs::path> step_dirs_in(const fs::path& root) {
  std::vector<fs::path> dirs;
  for (const auto& e : fs::directory_iterator(root)) dirs.push_back(e.path().filename());
  std::sort(dirs.begin(), dirs.end());
  return dirs;
}

}  // namespace

TEST_CASE("initial part: a refresh goes to a new directory; the newest complete one is reloaded") {
  test::TempDir tmp("initial-part");
  const fs::path root = tmp.path() / "checkpoints";
  Job job;
  ShardStore store(job.map, 0, 1, job.options);
  Logger log("server", LogLevel::kError);
  ServerCheckpointer checkpointer(16, root, log);  // refreshed every 16 / 8 = 2 steps
  checkpointer.set_rank(0);
  RunConfig config;
  checkpointer.enable_initial_part(checkpoint_fingerprint(config, 8));
  const std::int64_t key = store.keys().front();
  store.init(key, std::vector<float>(8, 1.0f));
  checkpointer.after_init(store);
  const fs::path parts = initial_part_dir(root, 0);
  REQUIRE(usable_initial_part(root, 0) == parts / "step-00000000");

  for (std::int64_t step = 0; step < 4; ++step) {
    const PushOutcome o = store.push(0, key, step, std::vector<float>(8, 0.5f), 0.1);
    CHECK(o.clock_advanced);
    checkpointer.at_step_boundary(store, key);
  }
  // Refreshed at steps 2 and 4; only the newest complete one is kept.
  CHECK(step_dirs_in(parts) == std::vector<fs::path>{"step-00000004"});
  REQUIRE(usable_initial_part(root, 0) == parts / "step-00000004");
  const CheckpointPart part = read_checkpoint_part(parts / "step-00000004", "server-0.ckpt");
  CHECK(part.i64("step") == 4);

  // A refresh cut short: its part is on disk, its manifest is not.
  write_checkpoint_part(parts / "step-00000006", "server-0.ckpt", part);
  CHECK(usable_initial_part(root, 0) == parts / "step-00000004");
}
