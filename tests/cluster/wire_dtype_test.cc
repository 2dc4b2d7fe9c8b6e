// ps.wire_dtype = "bfloat16" through a whole in-process cluster: the servers
// keep float32 weights and sums, so sync with bfloat16 on the wire equals sync
// over float32 fed the same rounded gradients (and seeing the same rounded
// weights), bit for bit; a non-finite gradient is still refused.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <limits>

#include "common/base/bfloat16.h"
#include "common/base/errors.h"
#include "common/math/update_rules.h"
#include "tests/cluster/run_workers.h"
#include "tools/cluster/local_cluster.h"
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

// Each worker's final pulled weights. bf16_wire: ps.wire_dtype = bfloat16;
// otherwise float32 on the wire with every gradient and every pulled weight
// rounded to bfloat16 by the worker itself.
std::vector<std::vector<float>> run(bool bf16_wire, int servers, int workers, int steps) {
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
    for (int step = 0; step < steps; ++step) {
      session.kv().wait(session.kv().pull(params, step));
      if (!bf16_wire) round_to_bfloat16(params);
      for (std::size_t i = 0; i < n; ++i) grad[i] = gradient(session.rank(), i, step, params[i]);
      if (!bf16_wire) round_to_bfloat16(grad);
      session.kv().wait(session.kv().push(grad, step, 0.1));
    }
    session.kv().wait(session.kv().pull(params, steps));
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
