// The servers' update in place (Optimizer::update_in_place, server/shard_store.h):
// the in-place SGD loop writes the bits of the out-of-place one (plain,
// momentum, Nesterov; float32 and bfloat16 gradients; the sync mean and the
// partial sum), the bounds that decide it hold and refuse what could
// overflow, a gradient value rewritten past its bound after the bound was
// taken is taken as 0, and a shard store updates in place exactly when no
// snapshot (a pull reply) holds the weights, with the same weights either
// way, held snapshots unchanged, and a bad gradient still changing nothing.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "server/parallel_apply.h"
#include "server/shard_store.h"

using namespace pstrain;

namespace {

std::vector<float> normals(std::size_t n, unsigned seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

std::vector<std::uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<std::uint16_t> h(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    h[i] = static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(v[i]) >> 16);
  }
  return h;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("sgd_update_in_place writes the bits sgd_update_into writes") {
  const std::size_t n = 1037;  // not a multiple of any vector width
  std::vector<float> w0 = normals(n, 1, 1.0f), v0 = normals(n, 2, 0.1f), g = normals(n, 3, 0.01f);
  const std::vector<float> partial = normals(n, 4, 0.01f);
  w0[5] = -0.0f, g[5] = 0.0f, w0[6] = 0.0f, g[6] = -0.0f, v0[7] = -0.0f;  // signed zeros kept
  const std::vector<std::uint16_t> h = to_bf16(g);
  for (const float momentum : {0.0f, 0.9f}) {
    for (const bool nesterov : {false, true}) {
      if (nesterov && momentum == 0.0f) continue;
      for (const int mean_of : {1, 2, 3}) {
        for (const bool bf16 : {false, true}) {
          for (const bool with_partial : {false, true}) {
            CAPTURE(momentum);
            CAPTURE(nesterov);
            CAPTURE(mean_of);
            CAPTURE(bf16);
            CAPTURE(with_partial);
            const update::SgdCoefficients c{0.05f, 5e-4f, momentum, nesterov};
            update::GradSource src{bf16 ? nullptr : g.data(), bf16 ? h.data() : nullptr, mean_of,
                                   with_partial ? partial.data() : nullptr};
            std::vector<float> w_out(n), v_out(n);
            const update::UpdateCheck check =
                update::sgd_update_into(w0.data(), w_out.data(), src, v0.data(), v_out.data(), n, c);
            REQUIRE(check.clean());
            std::vector<float> w = w0, v = v0;
            const std::uint32_t bound = update::gradient_bound_bits(src, n);
            REQUIRE(bound < update::kNonFiniteBits);
            update::sgd_update_in_place(w.data(), src, v.data(), n, c, bound);
            CHECK(same_bits(w, w_out));
            if (momentum != 0.0f) CHECK(same_bits(v, v_out));
          }
        }
      }
    }
  }
}

TEST_CASE("gradient_bound_bits and max_abs_bits: the largest |value|, a NaN or Inf at kNonFiniteBits or above") {
  for (const std::size_t n : {0u, 1u, 15u, 16u, 17u, 100u}) {
    CAPTURE(n);
    std::vector<float> v(n, 0.25f);
    CHECK(update::max_abs_bits(v.data(), n) == (n == 0 ? 0u : std::bit_cast<std::uint32_t>(0.25f)));
    if (n == 0) continue;
    v[n - 1] = -3.0f;  // the tail past the last full group of lanes counts too
    CHECK(update::max_abs_bits(v.data(), n) == std::bit_cast<std::uint32_t>(3.0f));
    v[0] = std::numeric_limits<float>::quiet_NaN();
    CHECK(update::max_abs_bits(v.data(), n) >= update::kNonFiniteBits);
    v[0] = -std::numeric_limits<float>::infinity();
    CHECK(update::max_abs_bits(v.data(), n) >= update::kNonFiniteBits);
  }
  const std::vector<float> g{1.0f, -2.0f, 0.5f}, p{-1.0f, -1.5f, 0.0f};
  // partial + g: 0, -3.5, 0.5; the mean is left out (it only shrinks).
  CHECK(update::gradient_bound_bits(update::GradSource{g.data(), nullptr, 3, p.data()}, 3) ==
        std::bit_cast<std::uint32_t>(3.5f));
  CHECK(update::gradient_bound_bits(update::GradSource{nullptr, to_bf16(g).data(), 1, nullptr}, 3) ==
        std::bit_cast<std::uint32_t>(2.0f));
}

TEST_CASE("sgd_bounds_after: the bounds hold over many updates, and what could overflow is refused") {
  const update::SgdCoefficients c{0.1f, 5e-4f, 0.9f, true};
  const std::size_t n = 4096;
  std::vector<float> w = normals(n, 5, 1.0f), v(n, 0.0f);
  double wb = std::bit_cast<float>(update::max_abs_bits(w.data(), n));
  double vb = 0.0;
  for (int step = 0; step < 200; ++step) {
    const std::vector<float> g = normals(n, 100 + static_cast<unsigned>(step), step % 7 == 0 ? 50.0f : 0.5f);
    const update::GradSource src{g.data(), nullptr, 1, nullptr};
    const std::uint32_t bits = update::gradient_bound_bits(src, n);
    const auto after = update::sgd_bounds_after(c, wb, vb, std::bit_cast<float>(bits));
    REQUIRE(after.has_value());
    update::sgd_update_in_place(w.data(), src, v.data(), n, c, bits);
    CHECK(std::bit_cast<float>(update::max_abs_bits(w.data(), n)) <= after->weights);
    CHECK(std::bit_cast<float>(update::max_abs_bits(v.data(), n)) <= after->velocity);
    wb = after->weights, vb = after->velocity;
  }
  const double big = 0.5 * static_cast<double>(std::numeric_limits<float>::max());
  CHECK_FALSE(update::sgd_bounds_after(c, 1.0, 0.0, big).has_value());                       // the gradient
  CHECK_FALSE(update::sgd_bounds_after(c, big, 0.0, 1.0).has_value());                       // the weights
  CHECK_FALSE(update::sgd_bounds_after(update::SgdCoefficients{1e30f, 0, 0, false}, 1, 0, 1e10).has_value());
  CHECK_FALSE(update::sgd_bounds_after(c, 1.0, std::numeric_limits<double>::infinity(), 1.0).has_value());
  CHECK(update::sgd_bounds_after(c, 1.0, 1.0, 1e30).has_value());  // large but finite all through
}

TEST_CASE("sgd_update_in_place: a value past the bound taken before the pass (rewritten since) counts as 0") {
  const update::SgdCoefficients c{0.5f, 0.0f, 0.0f, false};
  std::vector<float> w{1.0f, 1.0f, 1.0f, 1.0f};
  const std::vector<float> g{0.5f, 8.0f, std::numeric_limits<float>::quiet_NaN(), -0.25f};
  update::sgd_update_in_place(w.data(), update::GradSource{g.data(), nullptr, 1, nullptr}, nullptr, 4, c,
                              std::bit_cast<std::uint32_t>(1.0f));
  CHECK(w == std::vector<float>{0.75f, 1.0f, 1.0f, 1.125f});
}

namespace {

struct StoreRun {
  std::vector<float> weights;
  std::int64_t in_place = 0, updates = 0;
};

// `steps` steps of `workers` pushes to a 2-chunk store (n elements each),
// Nesterov momentum and weight decay, 2 apply threads in parts of 64;
// hold = a snapshot of every chunk held across each step (a pull reply being
// sent), checked unchanged after it.
StoreRun run_store(Mode mode, int workers, bool hold, bool in_place, int steps) {
  const std::int64_t n = 1500;
  ParamLayout layout;
  layout.add("w", {2 * n});
  const ShardMap map(layout, 1, n * 4);
  ApplyPool pool(2, 64);
  StoreOptions o;
  o.consistency = ConsistencyOptions{mode, 0};
  o.optimizer.momentum = 0.9, o.optimizer.nesterov = true, o.optimizer.weight_decay = 5e-4;
  o.ranges = &pool;
  o.in_place = in_place;
  ShardStore store(map, 0, workers, o);
  for (std::int64_t k = 0; k < 2; ++k) {
    store.init(k, normals(static_cast<std::size_t>(n), static_cast<unsigned>(9 + k), 1.0f));
  }
  for (int step = 0; step < steps; ++step) {
    std::vector<WeightsSnapshot> held;
    std::vector<std::vector<float>> copies;
    for (std::int64_t k = 0; k < 2 && hold; ++k) {
      held.push_back(store.snapshot(-1, k, step));
      copies.push_back(held.back().values());
    }
    for (int r = 0; r < workers; ++r) {
      for (std::int64_t k = 0; k < 2; ++k) {
        const auto seed = static_cast<unsigned>(1000 * step + 10 * r + k);
        const std::vector<float> g = normals(static_cast<std::size_t>(n), seed, 0.1f);
        store.push(r, k, step, std::span<const float>(g), 0.05);
      }
    }
    for (std::size_t k = 0; k < held.size(); ++k) CHECK(held[k].values() == copies[k]);
  }
  StoreRun out;
  for (std::int64_t k = 0; k < 2; ++k) {
    const std::vector<float> w = store.snapshot(-1, k, steps).values();
    out.weights.insert(out.weights.end(), w.begin(), w.end());
  }
  out.in_place = store.stats().in_place_updates;
  out.updates = store.stats().updates_applied;
  return out;
}

}  // namespace

TEST_CASE("shard store: in place exactly when no snapshot holds the weights, the same bits either way") {
  for (const Mode mode : {Mode::kSync, Mode::kAsync}) {
    for (const int workers : {1, 3}) {
      CAPTURE(static_cast<int>(mode));
      CAPTURE(workers);
      const StoreRun free = run_store(mode, workers, false, true, 6);
      const StoreRun held = run_store(mode, workers, true, true, 6);
      const StoreRun off = run_store(mode, workers, false, false, 6);
      CHECK(free.updates > 0);
      CHECK(free.in_place == free.updates);  // nothing held them
      // A snapshot held each chunk's weights as each step began: its first
      // update went to a spare; the new weights are held by none, so async's
      // later pushes of the step (3 workers) went in place.
      const std::int64_t first_of_step = 2 * 6;
      CHECK(held.in_place == held.updates - first_of_step);
      CHECK(off.in_place == 0);              // StoreOptions::in_place = false
      CHECK(same_bits(free.weights, held.weights));
      CHECK(same_bits(free.weights, off.weights));
    }
  }
}

TEST_CASE("shard store: in place, a NaN gradient or one that would overflow is refused and changes nothing") {
  ParamLayout layout;
  layout.add("w", {100});
  const ShardMap map(layout, 1, 400);
  StoreOptions o;
  o.consistency = ConsistencyOptions{Mode::kAsync, 0};
  o.optimizer.momentum = 0.9;
  ShardStore store(map, 0, 1, o);
  store.init(0, std::vector<float>(100, 1.0f));
  store.push(0, 0, 0, std::span<const float>(std::vector<float>(100, 0.5f)), 0.1);
  REQUIRE(store.stats().in_place_updates == 1);
  const std::vector<float> before = store.snapshot(0, 0, 1).values();
  std::vector<float> bad(100, 0.5f);
  bad[37] = std::numeric_limits<float>::quiet_NaN();
  CHECK_THROWS_AS(store.push(0, 0, 1, std::span<const float>(bad), 0.1), RequestError);
  std::vector<float> huge(100, std::numeric_limits<float>::max());
  CHECK_THROWS_AS(store.push(0, 0, 1, std::span<const float>(huge), 4.0), RequestError);  // 1 - 4 * max: -inf
  CHECK(store.snapshot(0, 0, 1).values() == before);
  CHECK(store.stats().in_place_updates == 1);
  CHECK(store.stats().pushes_rejected == 2);
  store.push(0, 0, 1, std::span<const float>(std::vector<float>(100, 0.5f)), 0.1);  // and it goes on in place
  CHECK(store.stats().in_place_updates == 2);
}

namespace {

// The largest |value| as bits, one value at a time (the reference for max_bits' lanes).
std::uint32_t scalar_bound(const std::vector<float>& v, std::size_t begin, std::size_t n) {
  std::uint32_t bits = 0;
  for (std::size_t i = begin; i < begin + n; ++i) {
    bits = std::max(bits, std::bit_cast<std::uint32_t>(v[i]) & 0x7fffffffu);
  }
  return bits;
}

bool same_bits(const float* a, const float* b, std::size_t n) { return std::memcmp(a, b, n * sizeof(float)) == 0; }

}  // namespace

TEST_CASE("in-place loops: the AVX2 build where the CPU has it, the same bits at every length and alignment") {
#if defined(__x86_64__) && defined(__GNUC__)
  // An x86-64 build without -mavx2 takes the AVX2 loops exactly when the CPU has AVX2.
  CHECK(update::in_place_wide_vectors() == (__builtin_cpu_supports("avx2") != 0));
#endif
  const std::size_t longest = 300;  // past several groups of 16 and 32 lanes, each tail length
  std::vector<float> w0 = normals(longest + 8, 11, 1.0f), v0 = normals(longest + 8, 12, 0.1f);
  std::vector<float> g = normals(longest + 8, 13, 0.01f);
  for (std::size_t offset = 0; offset < 4; ++offset) {    // 4-byte steps off the buffers' alignment
    for (std::size_t n = 0; n <= longest; n += (n < 70 ? 1 : 23)) {
      CAPTURE(offset);
      CAPTURE(n);
      const update::GradSource src{g.data() + offset, nullptr, 1, nullptr};
      REQUIRE(update::gradient_bound_bits(src, n) == scalar_bound(g, offset, n));
      REQUIRE(update::max_abs_bits(w0.data() + offset, n) == scalar_bound(w0, offset, n));
      const update::SgdCoefficients c{0.05f, 5e-4f, 0.9f, true};
      std::vector<float> w_out(n), v_out(n);
      REQUIRE(update::sgd_update_into(w0.data() + offset, w_out.data(), src, v0.data() + offset, v_out.data(), n, c)
                  .clean());
      std::vector<float> w(w0), v(v0);
      update::sgd_update_in_place(w.data() + offset, src, v.data() + offset, n, c, update::gradient_bound_bits(src, n));
      CHECK(same_bits(w.data() + offset, w_out.data(), n));
      CHECK(same_bits(v.data() + offset, v_out.data(), n));
      CHECK(same_bits(w.data(), w0.data(), offset));  // nothing outside the range
      CHECK(same_bits(w.data() + offset + n, w0.data() + offset + n, w0.size() - offset - n));
    }
  }
  // A NaN or Inf at any place of a range, the tail included, shows in the bound.
  for (const std::size_t n : {1u, 15u, 16u, 31u, 32u, 33u, 64u, 97u}) {
    for (std::size_t at = 0; at < n; at += (n > 40 ? 7 : 1)) {
      for (const float bad : {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity()}) {
        CAPTURE(n);
        CAPTURE(at);
        std::vector<float> h(g.begin(), g.begin() + static_cast<std::ptrdiff_t>(n));
        h[at] = bad;
        CHECK(update::gradient_bound_bits(update::GradSource{h.data(), nullptr, 1, nullptr}, n) >=
              update::kNonFiniteBits);
      }
    }
  }
}

TEST_CASE("shard store: a refused update leaves the weights and the optimizer's state bit for bit, every optimizer") {
  const std::int64_t n = 1037;  // not a multiple of any vector width
  ParamLayout layout;
  layout.add("w", {n});
  const ShardMap map(layout, 1, n * 4);
  struct Case {
    const char* name;
    double momentum;
    bool nesterov;
  };
  const Case cases[] = {{"sgd", 0.0, false}, {"sgd", 0.9, false}, {"sgd", 0.9, true}, {"adam", 0.0, false}};
  for (const Case k : cases) {
    CAPTURE(k.name);
    CAPTURE(k.momentum);
    CAPTURE(k.nesterov);
    StoreOptions o;
    o.consistency = ConsistencyOptions{Mode::kAsync, 0};
    o.optimizer.name = k.name;
    o.optimizer.momentum = k.momentum;
    o.optimizer.nesterov = k.nesterov;
    o.optimizer.weight_decay = 5e-4;
    ShardStore store(map, 0, 1, o), twin(map, 0, 1, o);  // twin: never sees the bad pushes
    const std::vector<float> w0 = normals(static_cast<std::size_t>(n), 21, 1.0f);
    store.init(0, w0);
    twin.init(0, w0);
    const std::vector<float> g1 = normals(static_cast<std::size_t>(n), 22, 0.01f);
    store.push(0, 0, 0, std::span<const float>(g1), 0.1);
    twin.push(0, 0, 0, std::span<const float>(g1), 0.1);
    const ChunkCheckpoint before = store.save_chunk(0);
    std::vector<std::vector<float>> bad;
    for (const std::size_t at : {std::size_t{0}, std::size_t{517}, static_cast<std::size_t>(n - 1)}) {
      for (const float x : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity()}) {
        bad.push_back(g1);
        bad.back()[at] = x;
      }
    }
    bad.emplace_back(static_cast<std::size_t>(n), std::numeric_limits<float>::max());  // overflows: w - lr * max
    for (std::size_t i = 0; i < bad.size(); ++i) {
      CAPTURE(i);
      CHECK_THROWS_AS(store.push(0, 0, 1, std::span<const float>(bad[i]), 4.0), RequestError);
      const ChunkCheckpoint now = store.save_chunk(0);
      CHECK(same_bits(now.weights, before.weights));
      CHECK(same_bits(now.optimizer_state, before.optimizer_state));
      CHECK(now.optimizer_steps == before.optimizer_steps);
      CHECK(now.version == before.version);
    }
    const std::vector<float> g2 = normals(static_cast<std::size_t>(n), 23, 0.01f);
    store.push(0, 0, 1, std::span<const float>(g2), 0.1);  // and it goes on as if they never came
    twin.push(0, 0, 1, std::span<const float>(g2), 0.1);
    CHECK(same_bits(store.save_chunk(0).weights, twin.save_chunk(0).weights));
    CHECK(same_bits(store.save_chunk(0).optimizer_state, twin.save_chunk(0).optimizer_state));
  }
}
