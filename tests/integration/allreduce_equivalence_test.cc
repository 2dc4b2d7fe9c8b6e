// Allreduce mode and the synchronous parameter server train the same model:
// with the same seed, data order, dropout seeds and optimizer, worker 0's
// final weights (run_dir/weights.bin) after k steps agree to float rounding.
// Real processes through `launch` on the tiny configs (small_cnn).
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>

#include "tests/integration/launch_test_util.h"

namespace {

// weights.bin (worker/train/checkpoint.h): "PSWT", u32 version, u64 N, N floats.
std::vector<float> read_weights(const it::fs::path& file) {
  const std::string bytes = it::read_file(file);
  REQUIRE(bytes.size() >= 16);
  REQUIRE(bytes.compare(0, 4, "PSWT") == 0);
  std::uint64_t n = 0;
  std::memcpy(&n, bytes.data() + 8, 8);
  REQUIRE(bytes.size() == 16 + 4 * n);
  std::vector<float> w(n);
  std::memcpy(w.data(), bytes.data() + 16, 4 * n);
  return w;
}

std::vector<float> train(const it::TempDir& dir, const char* config, const std::string& name,
                         const std::vector<std::string>& sets) {
  const auto run = dir.path() / name;
  auto args = it::launch_args(it::kSourceDir / "configs" / config, run);
  for (const std::string& s : sets) args.insert(args.end(), {"--set", s});
  args.push_back("--quiet");
  const it::Result r = it::run_launch(args, dir.path());
  INFO(r.output);
  REQUIRE(r.exit.code == 0);
  return read_weights(run / "weights.bin");
}

struct Difference {
  double max_abs = 0, max_weight = 0;
  int bitwise_different = 0;
};

Difference compare(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  Difference d;
  for (std::size_t i = 0; i < a.size(); ++i) {
    d.max_abs = std::max(d.max_abs, static_cast<double>(std::fabs(a[i] - b[i])));
    d.max_weight = std::max(d.max_weight, static_cast<double>(std::fabs(a[i])));
    d.bitwise_different += std::memcmp(&a[i], &b[i], sizeof(float)) != 0 ? 1 : 0;
  }
  return d;
}

}  // namespace

TEST_CASE("sync PS and allreduce reach the same weights after k steps: 2 workers, plain SGD") {
  it::TempDir dir;
  const std::vector<std::string> sets{"workload.seed=5", "optimizer.momentum=0", "workload.max_steps=12"};
  const auto ps = train(dir, "tiny_sync.toml", "sync", sets);
  const auto ar = train(dir, "tiny_allreduce.toml", "allreduce", sets);
  const Difference d = compare(ps, ar);
  MESSAGE("max |difference| " << d.max_abs << ", " << d.bitwise_different << " of " << ps.size()
                              << " weights not bit-identical");
  CHECK(d.max_abs <= 1e-6 * std::max(1.0, d.max_weight));

  // Not vacuous: one step more moves the weights far beyond that tolerance.
  auto more = sets;
  more.back() = "workload.max_steps=13";
  CHECK(compare(ps, train(dir, "tiny_allreduce.toml", "allreduce-13", more)).max_abs > 1e-4);
}

TEST_CASE("sync PS and allreduce agree with 3 workers and momentum to float tolerance") {
  it::TempDir dir;
  const std::vector<std::string> sets{"workload.seed=9", "cluster.workers=3", "optimizer.momentum=0.9",
                                      "workload.max_steps=10"};
  const Difference d =
      compare(train(dir, "tiny_sync.toml", "sync", sets), train(dir, "tiny_allreduce.toml", "allreduce", sets));
  MESSAGE("3 workers: max |difference| " << d.max_abs << " (weights up to " << d.max_weight << ")");
  CHECK(d.max_abs <= 1e-5 * std::max(1.0, d.max_weight));
}
