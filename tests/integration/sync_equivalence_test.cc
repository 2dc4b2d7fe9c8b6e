// The proof that sync mode is right: W workers with batch b per worker,
// plain SGD, reach the same weights (to float rounding) after k steps as one
// worker with batch W*b over the same samples in the same order. (The
// sampler gives rank r the permutation's positions r, r+W, ...; so the W
// workers' step-s batches together are exactly the single worker's step-s
// batch, and the servers' mean of W batch means is the mean over W*b.)
// Real scheduler, server and worker processes through `launch`.
#include <doctest/doctest.h>

#include <cmath>

#include "tests/integration/launch_test_util.h"
#include "worker/train/checkpoint.h"

namespace {

std::vector<float> train_sync(const it::TempDir& dir, const std::string& name, int workers, int batch) {
  const auto run = dir.path() / name;
  auto args = it::launch_args(it::kSourceDir / "configs" / "tiny_sync.toml", run);
  for (const std::string& s :
       {std::string("workload.seed=3"), std::string("optimizer.momentum=0"), std::string("workload.max_steps=10"),
        "cluster.workers=" + std::to_string(workers), "workload.batch_size=" + std::to_string(batch)}) {
    args.insert(args.end(), {"--set", s});
  }
  args.push_back("--quiet");
  const it::Result r = it::run_launch(args, dir.path());
  INFO(r.output);
  REQUIRE(r.exit.code == 0);
  return pstrain::read_weights(pstrain::weights_path(run.string()));
}

// max |a - b| relative to the largest weight.
double relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double diff = 0.0, scale = 1e-12;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, static_cast<double>(std::fabs(a[i] - b[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(a[i])));
  }
  return diff / scale;
}

}  // namespace

TEST_CASE("sync: 2 workers x batch 16 == 1 worker x batch 32 after 10 steps") {
  it::TempDir dir;
  const auto two = train_sync(dir, "two_workers", 2, 16);
  const auto one = train_sync(dir, "one_worker", 1, 32);
  const auto half = train_sync(dir, "one_worker_half_batch", 1, 16);  // other samples: must differ
  const double same = relative_difference(two, one);
  const double other = relative_difference(two, half);
  MESSAGE("max relative difference: equivalent runs " << same << ", different data " << other);
  CHECK(same < 1e-4);
  CHECK(other > 100 * same);
  CHECK(other > 1e-3);
}
