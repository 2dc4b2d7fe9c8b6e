// workload.on_nonfinite on one worker: "stop" throws the one line at the
// first non-finite value (suggesting "skip"); "skip" counts skipped steps,
// resets the streak on a good step, and throws the line naming the streak at
// max_skipped_steps in a row.
#include <doctest/doctest.h>

#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "common/base/errors.h"
#include "worker/train/divergence.h"
#include "tests/support/throw_text.h"

using namespace pstrain;

namespace {

using pstrain::test::thrown_text;  // tests/support/throw_text.h

WorkloadConfig workload(const std::string& policy, int max_skipped = 10) {
  WorkloadConfig w;
  w.on_nonfinite = policy;
  w.max_skipped_steps = max_skipped;
  return w;
}

}  // namespace

TEST_CASE("stop: the first non-finite value ends training with the one line") {
  NonFiniteGuard guard(workload("stop"), 3);
  CHECK_FALSE(guard.skipping());
  guard.end_step(0, 0.05, false);
  CHECK(thrown_text<DivergedError>([&] { guard.seen(177, 0.05, "loss nan"); }) ==
        "worker 3: training diverged at step 177 (loss nan, lr 0.05): lower optimizer.lr, or lengthen "
        "schedule.warmup_epochs, or set workload.on_nonfinite = \"skip\"");
}

TEST_CASE("skip: steps are counted; max_skipped_steps in a row ends training, naming the streak") {
  NonFiniteGuard guard(workload("skip", 3), 1);
  CHECK(guard.skipping());
  guard.seen(4, 0.5, "non-finite gradient");
  guard.end_step(4, 0.5, true);
  guard.seen(5, 0.5, "loss inf");
  guard.end_step(5, 0.5, true);
  CHECK(guard.skipped_in_a_row() == 2);
  guard.end_step(6, 0.5, false);  // a good step ends the streak
  CHECK(guard.skipped_in_a_row() == 0);
  for (std::int64_t step = 7; step < 9; ++step) {
    guard.seen(step, 0.5, "loss nan");
    guard.end_step(step, 0.5, true);
  }
  CHECK(guard.skipped_steps() == 4);
  guard.seen(9, 0.25, "non-finite averaged gradient");
  guard.seen(9, 0.25, "loss nan");  // the step's first value is the one named
  CHECK(thrown_text<DivergedError>([&] { guard.end_step(9, 0.25, true); }) ==
        "worker 1: training diverged at step 9 (non-finite averaged gradient; 3 steps skipped in a row, "
        "workload.max_skipped_steps = 3, lr 0.25): lower optimizer.lr, or lengthen schedule.warmup_epochs");
  CHECK(guard.skipped_steps() == 5);
}

TEST_CASE("skip with max_skipped_steps = 1: the first skipped step ends training") {
  NonFiniteGuard guard(workload("skip", 1), 0);
  guard.seen(2, 0.1, "loss nan");
  CHECK(thrown_text<DivergedError>([&] { guard.end_step(2, 0.1, true); }).find("1 steps skipped in a row") != std::string::npos);
}

TEST_CASE("bad settings are config errors") {
  CHECK_THROWS_AS(NonFiniteGuard(workload("ignore"), 0), ConfigError);
  CHECK_THROWS_AS(NonFiniteGuard(workload("skip", 0), 0), ConfigError);
}

TEST_CASE("all_finite finds NaN and both infinities anywhere") {
  std::vector<float> v(37, 1.5f);
  CHECK(all_finite(v));
  for (const float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity()}) {
    for (const std::size_t at : {std::size_t{0}, std::size_t{17}, std::size_t{36}}) {
      std::vector<float> w = v;
      w[at] = bad;
      CHECK_FALSE(all_finite(w));
    }
  }
  CHECK(all_finite(std::vector<float>{std::numeric_limits<float>::max(), -0.0f, 1e-45f}));
}

TEST_CASE("describe_loss names NaN without a sign") {
  CHECK(describe_loss(-std::numeric_limits<double>::quiet_NaN()) == "loss nan");
  CHECK(describe_loss(std::numeric_limits<double>::infinity()) == "loss inf");
  CHECK(describe_loss(-std::numeric_limits<double>::infinity()) == "loss -inf");
}
