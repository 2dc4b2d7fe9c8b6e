// GradientBuckets against a recording collective: which ranges become
// allreduces, when, and the errors for bad ranges.
#include <doctest/doctest.h>

#include <utility>
#include <vector>

#include "common/base/errors.h"
#include "worker/collective/gradient_buckets.h"

namespace pstrain {
namespace {

using Range = std::pair<std::int64_t, std::int64_t>;

// Records each started allreduce as [begin, end) relative to `base`.
class RecordingCollective final : public Collective {
 public:
  explicit RecordingCollective(const float* base) : base_(base) {}
  std::string name() const override { return "recording"; }
  int rank() const override { return 0; }
  int size() const override { return 1; }
  bool device_memory() const override { return false; }
  void start_allreduce_mean(float* data, std::size_t num_elems) override {
    const std::int64_t begin = data - base_;
    started.emplace_back(begin, begin + static_cast<std::int64_t>(num_elems));
  }
  bool wait_all(std::chrono::milliseconds) override { return true; }
  void broadcast(float*, std::size_t, int) override {}
  void barrier() override {}

  std::vector<Range> started;

 private:
  const float* base_;
};

}  // namespace

TEST_CASE("backward's ranges fill buckets of at least bucket_bytes, started as soon as full") {
  std::vector<float> grads(1000);
  RecordingCollective c(grads.data());
  GradientBuckets b(c, grads.data(), 1000, 400 * 4);  // 400 floats
  b.ready(900, 100);  // last layer first
  CHECK(c.started.empty());
  b.ready(500, 400);  // 500 floats pending: full
  CHECK(c.started == std::vector<Range>{{500, 1000}});
  b.ready(450, 50);
  b.ready(0, 450);
  CHECK(c.started == std::vector<Range>{{500, 1000}, {0, 500}});
  CHECK(b.unreported().empty());
  b.finish();
  CHECK(b.buckets_started() == 2);
  CHECK(b.buckets() == c.started);
}

TEST_CASE("finish starts the partly filled bucket, then every range never reported") {
  std::vector<float> grads(100);
  RecordingCollective c(grads.data());
  GradientBuckets b(c, grads.data(), 100, 1 << 20);  // one bucket would hold everything
  b.ready(80, 20);
  b.ready(60, 20);
  b.ready(10, 30);  // not adjacent: the pending [60, 100) is started first
  CHECK(c.started == std::vector<Range>{{60, 100}});
  CHECK(b.unreported() == std::vector<Range>{{0, 10}, {40, 60}});
  b.finish();
  CHECK(c.started == std::vector<Range>{{60, 100}, {10, 40}, {0, 10}, {40, 60}});
}

TEST_CASE("one byte buckets start every range alone; an empty model starts nothing") {
  std::vector<float> grads(10);
  RecordingCollective c(grads.data());
  GradientBuckets b(c, grads.data(), 10, 1);
  b.ready(5, 5);
  b.ready(0, 5);
  b.finish();
  CHECK(c.started == std::vector<Range>{{5, 10}, {0, 5}});
  RecordingCollective none(nullptr);
  GradientBuckets empty(none, nullptr, 0, 64);
  empty.finish();
  CHECK(none.started.empty());
}

TEST_CASE("bad ranges and sizes are errors naming them") {
  std::vector<float> grads(100);
  RecordingCollective c(grads.data());
  CHECK_THROWS_WITH_AS(GradientBuckets(c, grads.data(), 100, 0), "gradient buckets: bucket_bytes 0, expected >= 1",
                       ConfigError);
  CHECK_THROWS_WITH_AS(GradientBuckets(c, grads.data(), -1, 4), "gradient buckets: num_elems -1, expected >= 0",
                       ConfigError);
  GradientBuckets b(c, grads.data(), 100, 1 << 20);
  CHECK_THROWS_WITH_AS(b.ready(90, 20), "gradient buckets: range [90, 110) is empty or outside the 100 gradients",
                       ComputeError);
  CHECK_THROWS_WITH_AS(b.ready(-1, 2), "gradient buckets: range [-1, 1) is empty or outside the 100 gradients",
                       ComputeError);
  CHECK_THROWS_WITH_AS(b.ready(5, 0), "gradient buckets: range [5, 5) is empty or outside the 100 gradients",
                       ComputeError);
  b.ready(50, 50);
  CHECK_THROWS_WITH_AS(b.ready(60, 5), "gradient buckets: range [60, 65) overlaps a range reported before in this step",
                       ComputeError);
}

}  // namespace pstrain
