// Whole in-process clusters (scheduler and servers as threads, workers as
// threads over inproc://) under the consistency policies: ssp holds a fast
// worker within the bound of a straggler at every pull, and sync gives
// identical bits whatever order the workers' pushes arrive in.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <random>
#include <thread>

#include "tests/cluster/run_workers.h"
#include "tools/cluster/local_cluster.h"
#include "common/transport/zmq/zmq_transport.h"

using namespace pstrain;
using pstrain::test::run_workers;

namespace {

ParamLayout layout() {
  ParamLayout l;
  l.add("a", {300});
  l.add("b", {17});
  return l;
}

LocalClusterOptions options(Mode mode, int servers, int workers, int bound = 0) {
  LocalClusterOptions o;
  o.mode = mode;
  o.staleness_bound = bound;
  o.num_servers = servers;
  o.num_workers = workers;
  o.optimizer.name = "sgd";
  o.optimizer.momentum = 0.0;
  o.optimizer.weight_decay = 0.0;
  o.partition_bytes = 256;  // several chunks per server
  o.cluster.timeout_ms = 20000;
  o.cluster.heartbeat_interval_ms = 100;
  return o;
}


}  // namespace

TEST_CASE("ssp over sockets: a straggler holds the others within the bound at every pull; nobody deadlocks") {
  for (int bound : {0, 1, 3}) {
    CAPTURE(bound);
    constexpr int kWorkers = 3;
    constexpr int kSteps = 16;
    LocalCluster cluster(options(Mode::kSsp, 2, kWorkers, bound));
    zmq::context_t& ctx = cluster.zmq_context();  // inproc peers share the cluster's
    const ParamLayout l = layout();
    const auto n = static_cast<std::size_t>(l.total_elems());
    // clock[w]: steps worker w has sent its push for (raised before the push
    // leaves, so it is never behind the servers' count).
    std::array<std::atomic<int>, kWorkers> clock{};
    std::atomic<int> max_gap{0};
    std::array<std::int64_t, kWorkers> parked_us{};
    std::vector<std::vector<float>> finals(kWorkers);
    run_workers(kWorkers, [&](int r) {
      WorkerSession session(std::make_unique<ZmqTransport>(ctx), cluster.worker_options(r), l);
      std::vector<float> params(n, 0.0f);
      session.broadcast_initial(params);
      std::vector<float> grad(n, 1.0f);
      const int me = session.rank();
      for (int step = 0; step < kSteps; ++step) {
        const TicketResult pulled = session.kv().wait(session.kv().pull(params, step));
        parked_us[static_cast<std::size_t>(me)] += pulled.max_parked_us;
        int slowest = kSteps;
        for (const auto& c : clock) slowest = std::min(slowest, c.load());
        const int gap = step - slowest;
        CHECK_MESSAGE(gap <= bound, "worker ", me, " got weights for step ", step, " with the slowest at ", slowest);
        int seen = max_gap.load();
        while (gap > seen && !max_gap.compare_exchange_weak(seen, gap)) {
        }
        if (me == kWorkers - 1) std::this_thread::sleep_for(std::chrono::milliseconds(15));  // the straggler
        clock[static_cast<std::size_t>(me)].store(step + 1);
        session.kv().wait(session.kv().push(grad, step, 0.25));
      }
      session.scheduler().barrier("all pushed");
      session.kv().wait(session.kv().pull(params, kSteps));
      finals[static_cast<std::size_t>(me)] = params;
      session.finish();
    });
    cluster.join();
    // Every push applied once: 0 - 0.25 * steps * workers.
    for (const auto& f : finals) CHECK(f == std::vector<float>(n, -0.25f * kSteps * kWorkers));
    // The bound was reached and the fast workers were held at the servers.
    CHECK(max_gap.load() == bound);
    CHECK(parked_us[0] > 0);
    CHECK(parked_us[1] > 0);
  }
}

TEST_CASE("sync over sockets: two runs with different arrival orders give identical bits") {
  constexpr int kWorkers = 3;
  constexpr int kSteps = 12;
  const ParamLayout l = layout();
  const auto n = static_cast<std::size_t>(l.total_elems());
  auto run = [&](unsigned jitter_seed) {
    LocalCluster cluster(options(Mode::kSync, 3, kWorkers));
    zmq::context_t& ctx = cluster.zmq_context();  // inproc peers share the cluster's
    std::vector<float> final_params;
    run_workers(kWorkers, [&](int r) {
      WorkerSession session(std::make_unique<ZmqTransport>(ctx), cluster.worker_options(r), l);
      const int me = session.rank();
      std::vector<float> params(n);
      for (std::size_t i = 0; i < n; ++i) params[i] = std::sin(static_cast<float>(i));
      session.broadcast_initial(params);
      std::mt19937 jitter(jitter_seed * 31u + static_cast<unsigned>(me));
      std::vector<float> grad(n);
      for (int step = 0; step < kSteps; ++step) {
        session.kv().wait(session.kv().pull(params, step));
        // Gradients whose float sum depends on the order: magnitudes apart.
        for (std::size_t i = 0; i < n; ++i) {
          grad[i] = std::ldexp(params[i] + 0.37f * static_cast<float>(me + 1), static_cast<int>((i + static_cast<std::size_t>(me) * 7) % 23) - 11);
        }
        std::this_thread::sleep_for(std::chrono::microseconds(jitter() % 3000));
        session.kv().wait(session.kv().push(grad, step, 0.01));
      }
      session.scheduler().barrier("all pushed");
      session.kv().wait(session.kv().pull(params, kSteps));
      if (me == 0) final_params = params;
      session.finish();
    });
    cluster.join();
    return final_params;
  };
  const std::vector<float> a = run(1);
  const std::vector<float> b = run(2);
  REQUIRE(a.size() == n);
  REQUIRE(b.size() == n);
  CHECK(std::memcmp(a.data(), b.data(), n * sizeof(float)) == 0);
}
