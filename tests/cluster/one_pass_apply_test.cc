// The servers' one pass over a pushed gradient (server/shard_store.h): the
// finite check is fused into the pass that applies the gradient (async, ssp,
// sync with one worker) or adds it into the rank-ordered sum (sync), and a
// bfloat16 push is widened in that same pass. Checked here: a gradient whose
// LAST element is NaN (found only at the end of the pass) changes nothing,
// bit for bit, in every mode and optimizer; the fused kernels give the bits
// of the separate passes they replace.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <algorithm>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "common/base/bfloat16.h"
#include "common/base/errors.h"
#include "common/math/update_rules.h"
#include "server/consistency.h"
#include "server/shard_store.h"

using namespace pstrain;

namespace {

constexpr std::int64_t kElems = 1000;  // not a multiple of any vector width

OptimizerConfig optimizer(const std::string& name) {
  OptimizerConfig o;
  o.name = name;
  o.lr = 0.1;
  o.weight_decay = 1e-3;
  o.momentum = name == "sgd-plain" ? 0.0 : 0.9;
  o.nesterov = name == "sgd-nesterov";
  if (name != "adam") o.name = "sgd";
  return o;
}

struct Setup {
  ParamLayout layout;
  ShardMap map;
  Setup() {
    layout.add("w", {kElems});
    map = ShardMap(layout, 1, 1 << 20);
  }
};

StoreOptions store_options(Mode mode, const OptimizerConfig& o) {
  StoreOptions s;
  s.consistency = ConsistencyOptions{mode, mode == Mode::kSsp ? 1 : 0};
  s.optimizer = o;
  return s;
}

std::vector<float> values(std::uint32_t seed, float scale) {
  std::vector<float> v(static_cast<std::size_t>(kElems));
  std::uint32_t x = seed * 2654435761u + 1u;
  for (float& e : v) {
    x = x * 1664525u + 1013904223u;
    e = scale * (static_cast<float>(x >> 8) / 16777216.0f - 0.5f);
  }
  return v;
}

std::vector<float> last_bad(std::vector<float> g, float bad) {
  g.back() = bad;
  return g;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::string rejection(ShardStore& store, int worker, std::int64_t step, const std::vector<float>& g) {
  try {
    store.push(worker, 0, step, g, 0.1);
  } catch (const RequestError& e) {
    CHECK(e.status() == Status::kRejected);
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("a gradient whose last element is NaN or Inf changes nothing, in every mode and optimizer") {
  const float bads[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                        -std::numeric_limits<float>::infinity()};
  for (const Mode mode : {Mode::kSync, Mode::kAsync, Mode::kSsp}) {
    for (const char* opt : {"sgd-plain", "sgd-momentum", "sgd-nesterov", "adam"}) {
      for (const float bad : bads) {
        const std::string mode_name(to_string(mode));
        CAPTURE(mode_name);
        CAPTURE(opt);
        CAPTURE(bad);
        Setup s;
        // `store` sees the bad pushes, `twin` only the clean ones: they must agree bit for bit.
        ShardStore store(s.map, 0, 1, store_options(mode, optimizer(opt)));
        ShardStore twin(s.map, 0, 1, store_options(mode, optimizer(opt)));
        store.init(0, values(1, 2.0f));
        twin.init(0, values(1, 2.0f));
        for (std::int64_t step = 0; step < 3; ++step) {  // builds up momentum / moments first
          store.push(0, 0, step, values(10 + static_cast<std::uint32_t>(step), 1.0f), 0.1);
          twin.push(0, 0, step, values(10 + static_cast<std::uint32_t>(step), 1.0f), 0.1);
        }
        const auto held = store.snapshot(0, 0);  // as a pull reply being sent would hold it
        twin.snapshot(0, 0);                     // the same pulls (async: the same staleness)
        const std::vector<float> before = held.values();
        const std::string why = rejection(store, 0, 3, last_bad(values(20, 1.0f), bad));
        CHECK(why.find("push of chunk 0 from worker 0 at step 3: gradient has 1 non-finite values (first at element " +
                       std::to_string(kElems - 1) + "); not applied") != std::string::npos);
        CHECK(same_bits(store.snapshot(0, 0).values(), before));
        CHECK(same_bits(held.values(), before));
        CHECK(store.version(0) == 3);
        CHECK(store.stats().pushes_rejected == 1);
        CHECK(store.stats().updates_applied == 3);
        // The optimizer's state and the worker's clock did not move: the same
        // clean push then gives the twin's bits, and so does the next one.
        for (std::int64_t step = 3; step < 5; ++step) {
          CHECK(store.push(0, 0, step, values(30 + static_cast<std::uint32_t>(step), 1.0f), 0.1).applied);
          twin.push(0, 0, step, values(30 + static_cast<std::uint32_t>(step), 1.0f), 0.1);
          CHECK(same_bits(store.snapshot(0, 0).values(), twin.snapshot(0, 0).values()));
        }
        CHECK(same_bits(held.values(), before));  // the reply's snapshot never changed under it
        CHECK(store.save_chunk(0).optimizer_state == twin.save_chunk(0).optimizer_state);
      }
    }
  }
}

TEST_CASE("sync with 3 workers: a NaN last in a gradient summed, copied first or waiting early changes nothing") {
  for (const char* opt : {"sgd-momentum", "adam"}) {
    CAPTURE(opt);
    Setup s;
    ShardStore store(s.map, 0, 3, store_options(Mode::kSync, optimizer(opt)));
    ShardStore twin(s.map, 0, 3, store_options(Mode::kSync, optimizer(opt)));
    store.init(0, values(1, 2.0f));
    twin.init(0, values(1, 2.0f));
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (std::int64_t step = 0; step < 2; ++step) {
      const auto g = [&](int w) { return values(static_cast<std::uint32_t>(100 * step + w), 1.0f); };
      // Rank 0 first: its NaN gradient would be the sum's first copy.
      CHECK_FALSE(rejection(store, 0, step, last_bad(g(0), nan)).empty());
      // Rank 2 early (waits for ranks 0 and 1): its NaN gradient would be parked.
      CHECK_FALSE(rejection(store, 2, step, last_bad(g(2), nan)).empty());
      CHECK_FALSE(store.push(0, 0, step, g(0), 0.1).applied);
      CHECK_FALSE(store.push(2, 0, step, g(2), 0.1).applied);
      // Rank 1 in turn: its NaN gradient would be added into the sum.
      const auto before = store.snapshot(0, 0).values();
      CHECK_FALSE(rejection(store, 1, step, last_bad(g(1), nan)).empty());
      CHECK(same_bits(store.snapshot(0, 0).values(), before));
      CHECK(store.version(0) == step);
      CHECK(store.push(1, 0, step, g(1), 0.1).applied);  // completes the step with the clean sum
      for (int w : {2, 0, 1}) twin.push(w, 0, step, g(w), 0.1);
      CHECK(store.version(0) == step + 1);
      CHECK(same_bits(store.snapshot(0, 0).values(), twin.snapshot(0, 0).values()));
    }
    CHECK(store.stats().pushes_rejected == 6);
  }
}

TEST_CASE("a bfloat16 push is widened in the update's pass: the same bits as the widened float32 push") {
  for (const Mode mode : {Mode::kSync, Mode::kAsync}) {
    for (const int workers : {1, 2, 3}) {
      const std::string mode_name(to_string(mode));
        CAPTURE(mode_name);
      CAPTURE(workers);
      Setup s;
      ShardStore narrow(s.map, 0, workers, store_options(mode, optimizer("sgd-nesterov")));
      ShardStore wide(s.map, 0, workers, store_options(mode, optimizer("sgd-nesterov")));
      narrow.init(0, values(1, 2.0f));
      wide.init(0, values(1, 2.0f));
      for (std::int64_t step = 0; step < 3; ++step) {
        for (int w = workers - 1; w >= 0; --w) {  // highest rank first: early arrivals too
          std::vector<std::uint16_t> bf(static_cast<std::size_t>(kElems));
          to_bfloat16(values(static_cast<std::uint32_t>(7 * step + w), 1.0f), bf);
          std::vector<float> widened(bf.size());
          from_bfloat16(bf, widened);
          narrow.push(w, 0, step, std::span<const std::uint16_t>(bf), 0.1);
          wide.push(w, 0, step, widened, 0.1);
        }
        CHECK(same_bits(narrow.snapshot(0, 0).values(), wide.snapshot(0, 0).values()));
      }
      CHECK(narrow.version(0) == (mode == Mode::kSync ? 3 : 3 * workers));
    }
  }
  SUBCASE("a bfloat16 NaN last is refused too") {
    Setup s;
    ShardStore store(s.map, 0, 1, store_options(Mode::kAsync, optimizer("sgd-plain")));
    store.init(0, values(1, 2.0f));
    std::vector<std::uint16_t> bf(static_cast<std::size_t>(kElems), to_bfloat16(1.0f));
    bf.back() = to_bfloat16(std::numeric_limits<float>::quiet_NaN());
    const auto before = store.snapshot(0, 0).values();
    CHECK_THROWS_AS(store.push(0, 0, 0, std::span<const std::uint16_t>(bf), 0.1), RequestError);
    CHECK(same_bits(store.snapshot(0, 0).values(), before));
  }
}

TEST_CASE("the fused kernels give the bits of the separate passes (check, widen, mean, update)") {
  const std::size_t n = 1003;
  const std::vector<float> w0 = values(3, 4.0f);
  std::vector<float> sum = values(4, 3.0f);
  sum.resize(n, 0.25f);
  std::vector<float> w(w0);
  w.resize(n, 0.5f);
  for (const int mean_of : {1, 2, 3, 4, 7}) {
    CAPTURE(mean_of);
    // The separate passes, as the servers did them before: divide, then update in place.
    std::vector<float> mean(sum);
    if (mean_of > 1 && (mean_of & (mean_of - 1)) == 0) {
      for (float& x : mean) x *= 1.0f / static_cast<float>(mean_of);
    } else if (mean_of > 1) {
      for (float& x : mean) x /= static_cast<float>(mean_of);
    }
    for (const bool nesterov : {false, true}) {
      const update::SgdCoefficients c = update::sgd_coefficients(0.05, 0.9, 1e-4, nesterov);
      std::vector<float> w_ref(w), v_ref(n, 0.125f);
      update::sgd_update(w_ref.data(), mean.data(), v_ref.data(), n, c);
      std::vector<float> w_out(n), v(n, 0.125f), v_out(n);
      CHECK(update::sgd_update_into(w.data(), w_out.data(), update::GradSource{sum.data(), nullptr, mean_of}, v.data(),
                                    v_out.data(), n, c).clean());
      CHECK(same_bits(w_out, w_ref));
      CHECK(same_bits(v_out, v_ref));
    }
    const update::AdamCoefficients a = update::adam_coefficients(0.01, 0.9, 0.999, 1e-8, 1e-4, 3);
    std::vector<float> w_ref(w), m_ref(n, 0.01f), v_ref(n, 0.02f);
    update::adam_update(w_ref.data(), mean.data(), m_ref.data(), v_ref.data(), n, a);
    std::vector<float> w_out(n), m(n, 0.01f), v(n, 0.02f), m_out(n), v_out(n);
    CHECK(update::adam_update_into(w.data(), w_out.data(), update::GradSource{sum.data(), nullptr, mean_of}, m.data(),
                                   m_out.data(), v.data(), v_out.data(), n, a).clean());
    CHECK(same_bits(w_out, w_ref));
    CHECK(same_bits(m_out, m_ref));
    CHECK(same_bits(v_out, v_ref));
  }
  // Counting: every NaN and Inf, wherever it is; the first one's index.
  std::vector<float> g(n, 1.0f);
  g[0] = std::numeric_limits<float>::infinity();
  g[n - 1] = std::numeric_limits<float>::quiet_NaN();
  g[n / 2] = std::numeric_limits<float>::max();  // finite
  std::vector<float> out(n);
  CHECK(update::copy_checked(update::GradSource{g.data(), nullptr, 1}, out.data(), n) == 2);
  CHECK(update::add_checked(w.data(), update::GradSource{g.data(), nullptr, 1}, out.data(), n) == 2);
  CHECK(update::first_non_finite(update::GradSource{g.data(), nullptr, 1}, n) == 0);
  g[0] = 1.0f;
  CHECK(update::first_non_finite(update::GradSource{g.data(), nullptr, 1}, n) == static_cast<std::int64_t>(n - 1));
  std::vector<std::uint16_t> bf(n);
  to_bfloat16(g, bf);
  // float32's largest rounds to Inf in bfloat16 (common/base/bfloat16.h): counted too.
  CHECK(update::copy_checked(update::GradSource{nullptr, bf.data(), 1}, out.data(), n) == 2);
  CHECK(update::first_non_finite(update::GradSource{nullptr, bf.data(), 1}, n) == static_cast<std::int64_t>(n / 2));
  bf[n / 2] = to_bfloat16(1.0f);
  CHECK(update::copy_checked(update::GradSource{nullptr, bf.data(), 1}, out.data(), n) == 1);
  CHECK(update::first_non_finite(update::GradSource{nullptr, bf.data(), 1}, n) == static_cast<std::int64_t>(n - 1));
  CHECK_THROWS_AS(update::copy_checked(update::GradSource{g.data(), bf.data(), 1}, out.data(), n), ComputeError);
}

TEST_CASE("sync: the last contribution in rank order is added in the update's pass, with the bits of sum then update") {
  // Every arrival order of 2, 3 and 4 workers, with float32 and bfloat16
  // pushes: the store's weights equal a twin's (one worker) fed the mean of
  // the rank-ordered sum computed here, pass by pass. The last contribution
  // never goes into the store's sum (GradSource::partial), the others do.
  for (const char* opt : {"sgd-plain", "sgd-nesterov", "adam"}) {
    for (const int workers : {2, 3, 4}) {
      for (const bool bf16 : {false, true}) {
        CAPTURE(opt);
        CAPTURE(workers);
        CAPTURE(bf16);
        std::vector<int> order(static_cast<std::size_t>(workers));
        for (int w = 0; w < workers; ++w) order[static_cast<std::size_t>(w)] = w;
        Setup s;
        ShardStore store(s.map, 0, workers, store_options(Mode::kSync, optimizer(opt)));
        ShardStore twin(s.map, 0, 1, store_options(Mode::kSync, optimizer(opt)));
        store.init(0, values(1, 2.0f));
        twin.init(0, values(1, 2.0f));
        std::int64_t step = 0;
        do {
          std::vector<std::vector<float>> g(static_cast<std::size_t>(workers));
          std::vector<std::vector<std::uint16_t>> narrow(static_cast<std::size_t>(workers));
          for (int w = 0; w < workers; ++w) {
            const auto i = static_cast<std::size_t>(w);
            g[i] = values(static_cast<std::uint32_t>(1000 * step + w), 1.0f);
            if (bf16) {
              narrow[i].resize(g[i].size());
              to_bfloat16(g[i], narrow[i]);
              from_bfloat16(narrow[i], g[i]);  // the values the server sees
            }
          }
          for (const int w : order) {
            const auto i = static_cast<std::size_t>(w);
            const bool last = w == order.back();
            const PushOutcome out = bf16 ? store.push(w, 0, step, std::span<const std::uint16_t>(narrow[i]), 0.1)
                                         : store.push(w, 0, step, g[i], 0.1);
            CHECK(out.applied == last);
          }
          std::vector<float> mean(g[0]);
          for (int w = 1; w < workers; ++w) {
            for (std::size_t k = 0; k < mean.size(); ++k) mean[k] = mean[k] + g[static_cast<std::size_t>(w)][k];
          }
          for (float& x : mean) x = (workers & (workers - 1)) == 0 ? x * (1.0f / static_cast<float>(workers))
                                                                 : x / static_cast<float>(workers);
          twin.push(0, 0, step, mean, 0.1);
          REQUIRE(same_bits(store.snapshot(0, 0).values(), twin.snapshot(0, 0).values()));
          ++step;
        } while (std::next_permutation(order.begin(), order.end()));
        CHECK(store.version(0) == step);
      }
    }
  }
}

TEST_CASE("sync: which push the update's pass adds (skips, an early rank, a dropped worker)") {
  const std::vector<std::int64_t> elems{kElems};
  const std::vector<float> g0 = values(1, 1.0f), g1 = values(2, 1.0f), g2 = values(3, 1.0f);
  auto push = [&](int worker, const std::vector<float>& g, bool skip = false) {
    PushRequest p{0, worker, 0, update::GradSource{g.data(), nullptr, 1}, g.size(), 0.1 * (worker + 1)};
    p.skip = skip;
    if (skip) p.grad = {};
    return p;
  };
  SUBCASE("in rank order: only the last one, with the sum of the others and their count") {
    auto policy = make_consistency_policy(ConsistencyOptions{Mode::kSync, 0}, elems, 3);
    CHECK_FALSE(policy->update_on_arrival(0, 0, push(0, g0)));
    CHECK_FALSE(policy->on_push(0, 0, push(0, g0)));
    CHECK_FALSE(policy->update_on_arrival(0, 0, push(1, g1)));
    CHECK_FALSE(policy->on_push(0, 0, push(1, g1)));
    const std::optional<Update> last = policy->update_on_arrival(0, 0, push(2, g2));
    REQUIRE(last);
    CHECK(last->grad.f32 == g2.data());
    REQUIRE(last->grad.partial != nullptr);
    CHECK(last->grad.partial[5] == g0[5] + g1[5]);
    CHECK(last->grad.mean_of == 3);
    CHECK(last->contributors == 3);
    CHECK(last->lr == doctest::Approx(0.1));  // the lowest contributing rank's
    const std::optional<Update> applied = policy->on_push(0, 0, push(2, g2));
    REQUIRE(applied);
    CHECK(applied->grad.partial == last->grad.partial);
    CHECK(applied->grad.mean_of == 3);
  }
  SUBCASE("a lower rank last: it goes into the sum, and the highest rank's early gradient is the pass's add") {
    auto policy = make_consistency_policy(ConsistencyOptions{Mode::kSync, 0}, elems, 3);
    CHECK_FALSE(policy->on_push(0, 0, push(2, g2)));
    CHECK_FALSE(policy->on_push(0, 0, push(1, g1)));
    CHECK_FALSE(policy->update_on_arrival(0, 0, push(0, g0)));  // ranks 1 and 2 come after it in the sum
    const std::optional<Update> u = policy->on_push(0, 0, push(0, g0));
    REQUIRE(u);
    CHECK_FALSE(u->unchecked);  // rank 2's gradient was checked when it came
    CHECK(u->grad.mean_of == 3);
    REQUIRE(u->grad.partial != nullptr);
    CHECK(u->grad.partial[5] == g0[5] + g1[5]);
    CHECK(u->grad.f32[5] == g2[5]);
    CHECK(u->lr == doctest::Approx(0.1));
  }
  SUBCASE("the only contribution waited early: the pass reads it, no sum at all") {
    auto policy = make_consistency_policy(ConsistencyOptions{Mode::kSync, 0}, elems, 3);
    CHECK_FALSE(policy->on_push(0, 0, push(2, g2)));        // early
    CHECK_FALSE(policy->on_push(0, 0, push(1, g1, true)));  // a skip
    const std::optional<Update> u = policy->on_push(0, 0, push(0, g0, true));
    REQUIRE(u);
    CHECK(u->grad.partial == nullptr);
    CHECK(u->grad.mean_of == 1);
    CHECK(u->grad.f32[5] == g2[5]);
    CHECK(u->lr == doctest::Approx(0.3));  // rank 2's own
    CHECK(u->skips == 2);
  }
  SUBCASE("two contributions, the higher rank early: the pass adds the lower one to it, and it is used up") {
    auto policy = make_consistency_policy(ConsistencyOptions{Mode::kSync, 0}, elems, 3);
    CHECK_FALSE(policy->on_push(0, 0, push(2, g2, true)));  // a skip: two contributions in this step
    CHECK_FALSE(policy->on_push(0, 0, push(1, g1)));        // early: rank 0 is before it
    const std::optional<Update> u = policy->update_on_arrival(0, 0, push(0, g0));
    REQUIRE(u);
    CHECK(u->grad.f32 == g0.data());
    REQUIRE(u->grad.partial != nullptr);
    CHECK(u->grad.partial[5] == g1[5]);
    CHECK(u->grad.mean_of == 2);
    CHECK(u->contributors == 2);
    CHECK(u->skips == 1);
    CHECK(u->lr == doctest::Approx(0.1));  // rank 0's, the lowest contributing rank's
    REQUIRE(policy->on_push(0, 0, push(0, g0)));
    // Step 1 in rank order: rank 1's early gradient of step 0 is gone, not added again.
    auto at = [&](int worker, const std::vector<float>& g) {
      PushRequest p = push(worker, g);
      p.step = 1;
      return p;
    };
    CHECK_FALSE(policy->on_push(0, 1, at(0, g0)));
    CHECK_FALSE(policy->on_push(0, 1, at(1, g1)));
    const std::optional<Update> next = policy->on_push(0, 1, at(2, g2));
    REQUIRE(next);
    CHECK(next->contributors == 3);
    CHECK(next->grad.partial[5] == g0[5] + g1[5]);
  }
  SUBCASE("skips: the only contribution, alone; after a skip of a higher rank, the last") {
    auto policy = make_consistency_policy(ConsistencyOptions{Mode::kSync, 0}, elems, 3);
    CHECK_FALSE(policy->on_push(0, 0, push(2, g2, true)));
    CHECK_FALSE(policy->on_push(0, 0, push(0, g0, true)));
    const std::optional<Update> u = policy->update_on_arrival(0, 0, push(1, g1));
    REQUIRE(u);
    CHECK(u->grad.partial == nullptr);
    CHECK(u->grad.mean_of == 1);
    CHECK(u->skips == 2);
    CHECK(u->lr == doctest::Approx(0.2));
    CHECK_FALSE(policy->update_on_arrival(0, 0, push(1, g1, true)));  // a skip is never applied in a pass
  }
  SUBCASE("a dropped worker is not waited for; its early gradient still goes in first") {
    auto policy = make_consistency_policy(ConsistencyOptions{Mode::kSync, 0}, elems, 3);
    CHECK_FALSE(policy->on_push(0, 0, push(2, g2)));  // early, then dropped
    CHECK_FALSE(policy->drop_worker(2)[0]);
    CHECK_FALSE(policy->on_push(0, 0, push(0, g0)));
    CHECK_FALSE(policy->update_on_arrival(0, 0, push(1, g1)));  // rank 2's gradient is added after it
    auto policy2 = make_consistency_policy(ConsistencyOptions{Mode::kSync, 0}, elems, 3);
    CHECK_FALSE(policy2->drop_worker(0)[0]);
    CHECK_FALSE(policy2->on_push(0, 0, push(2, g2)));   // early: rank 1 is before it
    const std::optional<Update> two = policy2->update_on_arrival(0, 0, push(1, g1));  // one of two: fused
    REQUIRE(two);
    REQUIRE(two->grad.partial != nullptr);
    CHECK(two->grad.partial[5] == g2[5]);
    CHECK(two->contributors == 2);
    auto policy3 = make_consistency_policy(ConsistencyOptions{Mode::kSync, 0}, elems, 3);
    CHECK_FALSE(policy3->drop_worker(2)[0]);
    CHECK_FALSE(policy3->on_push(0, 0, push(0, g0)));
    const std::optional<Update> u = policy3->update_on_arrival(0, 0, push(1, g1));
    REQUIRE(u);
    CHECK(u->grad.partial != nullptr);
    CHECK(u->contributors == 2);
  }
}

TEST_CASE("the update kernels with a partial sum: partial + g, then the mean, then the update; only g is checked") {
  const std::size_t n = 1003;
  std::vector<float> partial = values(5, 3.0f), g = values(6, 1.0f), w = values(7, 2.0f);
  partial.resize(n, 0.75f);
  g.resize(n, -0.5f);
  w.resize(n, 0.5f);
  std::vector<std::uint16_t> narrow(n);
  to_bfloat16(g, narrow);
  std::vector<float> widened(n);
  from_bfloat16(narrow, widened);
  for (const int mean_of : {2, 3, 4}) {
    for (const bool bf16 : {false, true}) {
      CAPTURE(mean_of);
      CAPTURE(bf16);
      const std::vector<float>& seen = bf16 ? widened : g;
      std::vector<float> mean(n);
      for (std::size_t i = 0; i < n; ++i) {
        const float sum = partial[i] + seen[i];
        mean[i] = (mean_of & (mean_of - 1)) == 0 ? sum * (1.0f / static_cast<float>(mean_of)) : sum / static_cast<float>(mean_of);
      }
      update::GradSource source{bf16 ? nullptr : g.data(), bf16 ? narrow.data() : nullptr, mean_of, partial.data()};
      const update::SgdCoefficients c = update::sgd_coefficients(0.05, 0.9, 1e-4, false);
      std::vector<float> w_ref(w), v_ref(n, 0.125f), w_out(n), v(n, 0.125f), v_out(n);
      update::sgd_update(w_ref.data(), mean.data(), v_ref.data(), n, c);
      CHECK(update::sgd_update_into(w.data(), w_out.data(), source, v.data(), v_out.data(), n, c).clean());
      CHECK(same_bits(w_out, w_ref));
      CHECK(same_bits(v_out, v_ref));
      const update::AdamCoefficients a = update::adam_coefficients(0.01, 0.9, 0.999, 1e-8, 1e-4, 2);
      std::vector<float> wa_ref(w), m_ref(n, 0.01f), va_ref(n, 0.02f), m(n, 0.01f), va(n, 0.02f), m_out(n), va_out(n);
      update::adam_update(wa_ref.data(), mean.data(), m_ref.data(), va_ref.data(), n, a);
      CHECK(update::adam_update_into(w.data(), w_out.data(), source, m.data(), m_out.data(), va.data(), va_out.data(), n,
                                     a).clean());
      CHECK(same_bits(w_out, wa_ref));
      CHECK(same_bits(m_out, m_ref));
      CHECK(same_bits(va_out, va_ref));
    }
  }
  // A NaN in g is counted...
  std::vector<float> big(n, std::numeric_limits<float>::max()), out(n), vel(n, 0.0f), vel_out(n);
  std::vector<float> bad_g(g);
  bad_g[n - 1] = std::numeric_limits<float>::quiet_NaN();
  const update::SgdCoefficients plain = update::sgd_coefficients(0.05, 0.0, 0.0, false);
  CHECK(update::sgd_update_into(w.data(), out.data(), update::GradSource{bad_g.data(), nullptr, 2, partial.data()},
                                nullptr, nullptr, n, plain).bad_gradient == 1);
  // ... whose result is not looked at: the gradient's refusal comes first.
  CHECK(update::sgd_update_into(w.data(), out.data(), update::GradSource{bad_g.data(), nullptr, 2, partial.data()},
                                nullptr, nullptr, n, plain).bad_result == 0);
  // A partial sum and g that overflow together are no bad gradient (as the
  // sum's own add never was), but their update is: every element, from the first.
  const update::UpdateCheck overflow = update::sgd_update_into(
      w.data(), out.data(), update::GradSource{big.data(), nullptr, 2, big.data()}, nullptr, nullptr, n, plain);
  CHECK(overflow.bad_gradient == 0);
  CHECK(overflow.bad_result == static_cast<std::int64_t>(n));
  CHECK(overflow.first_bad_result == 0);
}

TEST_CASE("sync: a push for another step is refused for its step, before any update pass, NaN or not") {
  for (const int workers : {1, 2}) {
    CAPTURE(workers);
    Setup s;
    ShardStore store(s.map, 0, workers, store_options(Mode::kSync, optimizer("sgd-plain")));
    store.init(0, values(1, 2.0f));
    if (workers == 2) CHECK_FALSE(store.push(0, 0, 0, values(2, 1.0f), 0.1).applied);
    const auto before = store.snapshot(0, 0).values();
    // Rank 1 (or the only worker) would complete step 0, but pushes step 1 with a NaN last.
    const std::string why = rejection(store, workers - 1, 1, last_bad(values(3, 1.0f), std::numeric_limits<float>::quiet_NaN()));
    CHECK(why.find("ahead of the chunk's version 0") != std::string::npos);
    CHECK(why.find("non-finite") == std::string::npos);
    CHECK(same_bits(store.snapshot(0, 0).values(), before));
    CHECK(store.version(0) == 0);
    // And the step still completes with the right push.
    CHECK(store.push(workers - 1, 0, 0, values(3, 1.0f), 0.1).applied);
    CHECK(store.version(0) == 1);
  }
}

TEST_CASE("sync, random steps: arrival orders, skips, NaN pushes refused and sent again, drops mid-step; the weights "
          "are those of the rank-ordered sum, bit for bit") {
  // A reference of sync's rule, computed here pass by pass: when every live
  // worker is in, the contributions (a dropped worker's included when it
  // pushed before the drop) are summed in rank order, divided by their count
  // (times 1/n for a power of two), and applied with the lowest contributing
  // rank's rate. The store must give its bits whatever the order of events,
  // which exercises every fused path (the last push's add, one of two, the
  // last early gradient's add) and the paths that fuse nothing.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::uint32_t rng = 12345u;
  auto next = [&](std::uint32_t n) {
    rng = rng * 1664525u + 1013904223u;
    return (rng >> 8) % n;
  };
  for (int scenario = 0; scenario < 200; ++scenario) {
    const int workers = 2 + static_cast<int>(next(4));  // 2..5
    CAPTURE(scenario);
    CAPTURE(workers);
    Setup s;
    StoreOptions o = store_options(Mode::kSync, optimizer("sgd-plain"));
    o.optimizer.weight_decay = 0.0;
    ShardStore store(s.map, 0, workers, o);
    std::vector<float> w = values(static_cast<std::uint32_t>(scenario), 2.0f);
    store.init(0, w);
    std::vector<bool> live(static_cast<std::size_t>(workers), true);
    for (std::int64_t step = 0; step < 6; ++step) {
      CAPTURE(step);
      std::vector<int> order;
      for (int r = 0; r < workers; ++r) {
        if (live[static_cast<std::size_t>(r)]) order.push_back(r);
      }
      if (order.empty()) break;
      for (std::size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[next(static_cast<std::uint32_t>(i))]);
      std::map<int, std::pair<std::vector<float>, double>> in;  // rank -> gradient, lr of the step's contributions
      bool applied = false;
      for (std::size_t k = 0; k < order.size() && !applied; ++k) {
        const int r = order[k];
        if (!live[static_cast<std::size_t>(r)]) continue;
        const double lr = 0.05 * (1 + r);
        std::vector<float> g = values(static_cast<std::uint32_t>(1000 * scenario + 10 * step + r), 1.0f);
        if (next(5) == 0) {  // a NaN first: refused, nothing changes; then the clean one
          CHECK_FALSE(rejection(store, r, step, last_bad(g, nan)).empty());
        }
        const std::uint32_t what = next(8);
        if (what == 0) {  // a skip push: in, without a contribution
          applied = store.skip(r, 0, step).applied;
        } else {
          applied = store.push(r, 0, step, g, lr).applied;
          in[r] = {g, lr};
        }
        // Now and then, mid-step, a drop of another live worker: one not yet in, or one that is
        // (its gradient, summed or waiting early, stays in the step).
        std::vector<int> others;
        for (int x = 0; x < workers; ++x) {
          if (x != r && live[static_cast<std::size_t>(x)]) others.push_back(x);
        }
        if (!applied && !others.empty() && next(5) == 0) {
          const int victim = others[next(static_cast<std::uint32_t>(others.size()))];
          live[static_cast<std::size_t>(victim)] = false;
          applied = !store.drop_worker(victim).empty();
        }
      }
      REQUIRE(applied);
      REQUIRE(store.version(0) == step + 1);
      if (!in.empty()) {
        std::vector<float> sum(in.begin()->second.first);
        for (auto it = std::next(in.begin()); it != in.end(); ++it) {
          for (std::size_t i = 0; i < sum.size(); ++i) sum[i] = sum[i] + it->second.first[i];
        }
        const auto n = static_cast<int>(in.size());
        const update::SgdCoefficients c = update::sgd_coefficients(in.begin()->second.second, 0.0, 0.0, false);
        for (std::size_t i = 0; i < w.size(); ++i) {
          const float mean = (n & (n - 1)) == 0 ? sum[i] * (1.0f / static_cast<float>(n)) : sum[i] / static_cast<float>(n);
          w[i] = update::sgd_plain(w[i], mean, c);
        }
      }
      REQUIRE(same_bits(store.snapshot(0, 0).values(), w));
    }
  }
}
