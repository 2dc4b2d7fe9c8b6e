// ps.wire_dtype = "bfloat16" through a whole in-process cluster: the servers
// keep float32 weights and sums, so sync with bfloat16 on the wire equals sync
// over float32 fed the same rounded gradients (and seeing the same rounded
// weights), bit for bit; a non-finite gradient is still refused.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <optional>

#include "common/base/bfloat16.h"
#include "common/base/errors.h"
#include "common/math/update_rules.h"
#include "tests/cluster/run_workers.h"
#include "tools/cluster/local_cluster.h"
#include "worker/client/host_copy_engine.h"
#include "common/transport/zmq/zmq_transport.h"

using namespace pstrain;
using pstrain::test::run_workers;

namespace {

ParamLayout layout() {
  ParamLayout l;
  l.add("w", {40, 30});
  l.add("bias", {30});
  l.add("out", {17});
  return l;
}

LocalClusterOptions options(int servers, int workers) {
  LocalClusterOptions o;
  o.mode = Mode::kSync;
  o.num_servers = servers;
  o.num_workers = workers;
  o.optimizer.name = "sgd";
  o.optimizer.momentum = 0.9;  // server-side state in float32 too
  o.optimizer.weight_decay = 0.01;
  o.partition_bytes = 1024;  // several chunks per server
  o.cluster.timeout_ms = 20000;
  o.cluster.heartbeat_interval_ms = 100;
  return o;
}

// A gradient that depends on the weights the worker holds, with values
// bfloat16 cannot hold exactly.
float gradient(int rank, std::size_t i, int step, float weight) {
  return std::sin(0.37f * static_cast<float>(i) + 0.11f * static_cast<float>(rank) + static_cast<float>(step)) * 0.3f +
         0.05f * weight;
}

// A bfloat16 step the way the copy pipeline does it: the pull lands in
// bfloat16 as received and the copy engine (the host's copy thread) widens
// it; the gradient is narrowed by the engine and pushed as it is.
struct EngineConversion {
  HostCopyEngine engine;
  std::vector<std::uint16_t> wire_params, wire_grads;
  explicit EngineConversion(std::size_t n) : wire_params(n), wire_grads(n) { engine.prepare_bfloat16(n); }
  void pull(KVClient& kv, std::vector<float>& params, int step) {
    kv.wait(kv.pull_bfloat16(wire_params, step));
    engine.wait(engine.upload_widened(params.data(), wire_params.data(), 0, params.size(), -1));
  }
  void push(KVClient& kv, const std::vector<float>& grad, int step) {
    engine.wait(engine.download_narrowed(wire_grads.data(), grad.data(), 0, grad.size(), -1));
    kv.wait(kv.push_bfloat16(wire_grads, step, 0.1));
  }
};

// Each worker's final pulled weights. bf16_wire: ps.wire_dtype = bfloat16
// (engine: converted by a copy engine, else by the KV client); otherwise
// float32 on the wire with every gradient and every pulled weight rounded to
// bfloat16 by the worker itself.
std::vector<std::vector<float>> run(bool bf16_wire, int servers, int workers, int steps, bool engine = false) {
  LocalCluster cluster(options(servers, workers));
  zmq::context_t& ctx = cluster.zmq_context();  // inproc peers share the cluster's
  const ParamLayout l = layout();
  const auto n = static_cast<std::size_t>(l.total_elems());
  std::vector<std::vector<float>> finals(static_cast<std::size_t>(workers));
  run_workers(workers, [&](int r) {
    WorkerSessionOptions wo = cluster.worker_options(r);
    if (bf16_wire) wo.wire_dtype = DType::kBFloat16;
    WorkerSession session(std::make_unique<ZmqTransport>(ctx), wo, l);
    std::vector<float> params(n);
    for (std::size_t i = 0; i < n; ++i) params[i] = 0.01f * static_cast<float>(i % 13) - 0.05f;
    session.broadcast_initial(params);  // init is float32 either way
    std::vector<float> grad(n);
    std::optional<EngineConversion> conversion;
    if (engine) conversion.emplace(n);
    KVClient& kv = session.kv();
    for (int step = 0; step < steps; ++step) {
      engine ? conversion->pull(kv, params, step) : (void)kv.wait(kv.pull(params, step));
      if (!bf16_wire) round_to_bfloat16(params);
      for (std::size_t i = 0; i < n; ++i) grad[i] = gradient(session.rank(), i, step, params[i]);
      if (!bf16_wire) round_to_bfloat16(grad);
      engine ? conversion->push(kv, grad, step) : (void)kv.wait(kv.push(grad, step, 0.1));
    }
    engine ? conversion->pull(kv, params, steps) : (void)kv.wait(kv.pull(params, steps));
    if (!bf16_wire) round_to_bfloat16(params);
    finals[static_cast<std::size_t>(session.rank())] = params;
    session.finish();
  });
  cluster.join();
  return finals;
}

}  // namespace

TEST_CASE("sync with bfloat16 on the wire equals sync fed the same rounded gradients") {
  const auto bf16 = run(true, 2, 3, 6);
  const auto reference = run(false, 2, 3, 6);
  REQUIRE(bf16.size() == reference.size());
  std::size_t moved = 0;
  for (std::size_t w = 0; w < bf16.size(); ++w) {
    REQUIRE(bf16[w].size() == reference[w].size());
    for (std::size_t i = 0; i < bf16[w].size(); ++i) {
      CHECK(bf16[w][i] == reference[w][i]);
      if (w == 0 && bf16[w][i] != from_bfloat16(to_bfloat16(0.01f * static_cast<float>(i % 13) - 0.05f))) ++moved;
    }
  }
  CHECK(moved > bf16[0].size() / 2);  // the updates did something
}

TEST_CASE("bfloat16 converted by the copy engine equals bfloat16 converted by the KV client, bit for bit") {
  const auto engine = run(true, 2, 3, 6, /*engine=*/true);
  const auto client = run(true, 2, 3, 6);
  REQUIRE(engine.size() == client.size());
  for (std::size_t w = 0; w < engine.size(); ++w) {
    REQUIRE(engine[w].size() == client[w].size());
    std::size_t different = 0;
    for (std::size_t i = 0; i < engine[w].size(); ++i) {
      different += std::bit_cast<std::uint32_t>(engine[w][i]) != std::bit_cast<std::uint32_t>(client[w][i]) ? 1 : 0;
    }
    CHECK(different == 0);
  }
}

TEST_CASE("push_bfloat16 and pull_bfloat16 need ps.wire_dtype = bfloat16 and a whole flat buffer") {
  LocalCluster cluster(options(1, 1));
  const ParamLayout l = layout();
  const auto n = static_cast<std::size_t>(l.total_elems());
  WorkerSession session(std::make_unique<ZmqTransport>(cluster.zmq_context()), cluster.worker_options(0), l);
  std::vector<float> params(n, 0.5f);
  session.broadcast_initial(params);
  std::vector<std::uint16_t> wire(n);
  CHECK_THROWS_WITH_AS(session.kv().push_bfloat16(wire, 0, 0.1),
                       "push_bfloat16: the wire dtype is float32, not bfloat16 (ps.wire_dtype)", ConfigError);
  CHECK_THROWS_WITH_AS(session.kv().pull_bfloat16(wire, 0),
                       "pull_bfloat16: the wire dtype is float32, not bfloat16 (ps.wire_dtype)", ConfigError);
  session.finish();
  cluster.join();
}

TEST_CASE("sync with bfloat16 on the wire equals allreduce fed the same rounded gradients") {
  // Allreduce of 2 workers: each computes its gradient on the weights it
  // holds (here rounded to bfloat16, as the servers' pull replies are) and
  // rounds it to bfloat16 as a push does; the gradients are averaged as Gloo
  // averages two ranks, (g0 + g1) * 0.5 (bit for bit: tests/collective/
  // gloo_collective_test.cc), and every worker applies the shared update rule
  // (common/math/update_rules.h, the CPU backend's) to float32 weights.
  constexpr int kWorkers = 2, kSteps = 6;
  const auto bf16 = run(true, 2, kWorkers, kSteps);
  const ParamLayout l = layout();
  const auto n = static_cast<std::size_t>(l.total_elems());
  std::vector<float> w(n), velocity(n, 0.0f);
  for (std::size_t i = 0; i < n; ++i) w[i] = 0.01f * static_cast<float>(i % 13) - 0.05f;
  const update::SgdCoefficients c = update::sgd_coefficients(0.1, 0.9, 0.01, false);
  for (int step = 0; step < kSteps; ++step) {
    std::vector<float> held(w);
    round_to_bfloat16(held);
    std::vector<float> mean(n);
    for (int r = 0; r < kWorkers; ++r) {
      std::vector<float> g(n);
      for (std::size_t i = 0; i < n; ++i) g[i] = gradient(r, i, step, held[i]);
      round_to_bfloat16(g);
      for (std::size_t i = 0; i < n; ++i) mean[i] = r == 0 ? g[i] : mean[i] + g[i];
    }
    for (float& x : mean) x *= 0.5f;
    update::sgd_update(w.data(), mean.data(), velocity.data(), n, c);
  }
  round_to_bfloat16(w);  // what the final pull in bfloat16 gives
  for (int r = 0; r < kWorkers; ++r) {
    CAPTURE(r);
    REQUIRE(bf16[static_cast<std::size_t>(r)].size() == n);
    std::size_t different = 0;
    for (std::size_t i = 0; i < n; ++i) different += bf16[static_cast<std::size_t>(r)][i] != w[i] ? 1 : 0;
    CHECK(different == 0);
  }
}

TEST_CASE("a non-finite gradient sent in bfloat16 is still refused by the servers") {
  LocalCluster cluster(options(1, 1));
  zmq::context_t& ctx = cluster.zmq_context();  // inproc peers share the cluster's
  const ParamLayout l = layout();
  const auto n = static_cast<std::size_t>(l.total_elems());
  WorkerSessionOptions wo = cluster.worker_options(0);
  wo.wire_dtype = DType::kBFloat16;
  WorkerSession session(std::make_unique<ZmqTransport>(ctx), wo, l);
  std::vector<float> params(n, 0.5f);
  session.broadcast_initial(params);
  std::vector<float> grad(n, 0.25f);
  grad[3] = std::bit_cast<float>(0x7f800001u);  // a NaN whose payload is only in the low 16 bits
  std::string error;
  try {
    session.kv().wait(session.kv().push(grad, 0, 0.1));
  } catch (const TransportError& e) {
    error = e.what();
  }
  CHECK(error.find("non-finite") != std::string::npos);
  // Nothing was applied to the chunk holding the NaN (the others took their update).
  session.kv().wait(session.kv().pull(params, 0));
  const Chunk& bad = session.shard_map().chunk(0);
  REQUIRE(bad.offset == 0);
  for (std::int64_t i = 0; i < bad.num_elems; ++i) CHECK(params[static_cast<std::size_t>(i)] == 0.5f);
  CHECK(params.back() != 0.5f);
  session.finish();
  cluster.join();
}

TEST_CASE("ps.wire_dtype names map onto the protocol's dtypes") {
  CHECK(wire_dtype_of("float32") == DType::kFloat32);
  CHECK(wire_dtype_of("bfloat16") == DType::kBFloat16);
  CHECK_THROWS_AS(wire_dtype_of("fp8"), ConfigError);
}
