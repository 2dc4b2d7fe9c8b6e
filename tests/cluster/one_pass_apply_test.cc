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
#include <limits>
#include <string>
#include <vector>

#include "common/bfloat16.h"
#include "common/errors.h"
#include "common/update_rules.h"
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
                                    v_out.data(), n, c) == 0);
      CHECK(same_bits(w_out, w_ref));
      CHECK(same_bits(v_out, v_ref));
    }
    const update::AdamCoefficients a = update::adam_coefficients(0.01, 0.9, 0.999, 1e-8, 1e-4, 3);
    std::vector<float> w_ref(w), m_ref(n, 0.01f), v_ref(n, 0.02f);
    update::adam_update(w_ref.data(), mean.data(), m_ref.data(), v_ref.data(), n, a);
    std::vector<float> w_out(n), m(n, 0.01f), v(n, 0.02f), m_out(n), v_out(n);
    CHECK(update::adam_update_into(w.data(), w_out.data(), update::GradSource{sum.data(), nullptr, mean_of}, m.data(),
                                   m_out.data(), v.data(), v_out.data(), n, a) == 0);
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
  // float32's largest rounds to Inf in bfloat16 (common/bfloat16.h): counted too.
  CHECK(update::copy_checked(update::GradSource{nullptr, bf.data(), 1}, out.data(), n) == 2);
  CHECK(update::first_non_finite(update::GradSource{nullptr, bf.data(), 1}, n) == static_cast<std::int64_t>(n / 2));
  bf[n / 2] = to_bfloat16(1.0f);
  CHECK(update::copy_checked(update::GradSource{nullptr, bf.data(), 1}, out.data(), n) == 1);
  CHECK(update::first_non_finite(update::GradSource{nullptr, bf.data(), 1}, n) == static_cast<std::int64_t>(n - 1));
  CHECK_THROWS_AS(update::copy_checked(update::GradSource{g.data(), bf.data(), 1}, out.data(), n), ComputeError);
}
