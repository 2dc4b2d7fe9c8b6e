// Whole clusters in one process over inproc:// (and every other transport:
// tcp, ipc, shm, the fake): scheduler and servers as threads, workers as
// threads, many push/pull rounds, final weights exact.
#include <doctest/doctest.h>

#include <thread>

#include "common/base/errors.h"
#include "tests/cluster/run_workers.h"
#include "tools/cluster/local_cluster.h"
#include "common/transport/zmq/zmq_transport.h"

using namespace pstrain;
using pstrain::test::run_workers;

namespace {

ParamLayout test_layout() {
  ParamLayout layout;
  layout.add("a", {7});
  layout.add("b", {10, 100});
  layout.add("c", {3});
  return layout;
}

LocalClusterOptions options(Mode mode, int servers, int workers) {
  LocalClusterOptions o;
  o.mode = mode;
  o.num_servers = servers;
  o.num_workers = workers;
  o.optimizer.name = "sgd";
  o.optimizer.momentum = 0.0;
  o.optimizer.weight_decay = 0.0;
  o.partition_bytes = 256;  // many chunks, split unevenly
  o.cluster.timeout_ms = 20000;
  o.cluster.heartbeat_interval_ms = 100;
  return o;
}

float initial(std::size_t i) { return static_cast<float>(i % 5); }
float gradient(int rank, std::size_t i, int step) { return static_cast<float>(rank + 1 + static_cast<int>(i % 3) + step); }


void run_rounds(Mode mode, int servers, int workers, int rounds, const std::string& transport = "inproc") {
  LocalClusterOptions o = options(mode, servers, workers);
  o.transport = transport;
  LocalCluster cluster(o);
  const ParamLayout layout = test_layout();
  const auto n = static_cast<std::size_t>(layout.total_elems());
  std::vector<std::vector<float>> finals(static_cast<std::size_t>(workers));
  run_workers(workers, [&](int r) {
    WorkerSession session(cluster.transport(), cluster.worker_options(r), layout);
    std::vector<float> params(n, 99.0f);
    if (session.rank() == 0) {
      for (std::size_t i = 0; i < n; ++i) params[i] = initial(i);
    }
    session.broadcast_initial(params);
    for (std::size_t i = 0; i < n; ++i) REQUIRE(params[i] == initial(i));
    // As a worker's (worker/train/ps_worker.cc): the gradients in the
    // transport's send memory, with shm an arena the servers read in place.
    const SendFloats send = cluster.transport().allocate_send_floats(n);
    const std::span<float> grad = send.values;
    for (int step = 0; step < rounds; ++step) {
      session.kv().wait(session.kv().pull(params, step));
      for (std::size_t i = 0; i < n; ++i) grad[i] = gradient(session.rank(), i, step);
      session.kv().wait(session.kv().push(grad, step, 1.0));
    }
    session.scheduler().barrier("all pushed");
    session.kv().wait(session.kv().pull(params, rounds));
    finals[static_cast<std::size_t>(session.rank())] = params;
    session.finish();
  });
  cluster.join();
  if (cluster.shm() != nullptr) {  // the tensors did go through shared memory, both ways
    const ShmTransport::Stats st = cluster.shm()->stats();
    CHECK(st.accepted == static_cast<std::uint64_t>(workers * servers));
    CHECK(st.refused == 0);
    CHECK(st.shm_bodies > static_cast<std::uint64_t>(2 * rounds * workers));
    // And once the arenas are taken, pushes read in place and replies sent in place.
    CHECK(st.arenas_accepted >= static_cast<std::uint64_t>(workers * servers));
    CHECK(st.arenas_refused == 0);
    CHECK(st.arena_bodies_read >= static_cast<std::uint64_t>(rounds * workers));
    CHECK(st.arena_bodies >= static_cast<std::uint64_t>(2 * rounds * workers));
  }
  // Expected: sync subtracts the mean of each step, async every gradient; both
  // sum to the same integer-valued totals here, divided by W in sync.
  for (std::size_t i = 0; i < n; ++i) {
    double total = 0;
    for (int step = 0; step < rounds; ++step) {
      for (int r = 0; r < workers; ++r) total += gradient(r, i, step);
    }
    const double expected = initial(i) - (mode == Mode::kSync ? total / workers : total);  // ssp: as async
    for (int r = 0; r < workers; ++r) CHECK(finals[static_cast<std::size_t>(r)][i] == static_cast<float>(expected));
  }
}

}  // namespace

TEST_CASE("in-process clusters: 1..4 workers x 1..3 servers, sync, async and ssp, exact final weights") {
  for (Mode mode : {Mode::kSync, Mode::kAsync, Mode::kSsp}) {
    for (int servers = 1; servers <= 3; ++servers) {
      for (int workers = 1; workers <= 4; ++workers) {
        CAPTURE(to_string(mode));
        CAPTURE(servers);
        CAPTURE(workers);
        run_rounds(mode, servers, workers, 12);
      }
    }
  }
}

// The transports a whole cluster runs over.
const char* const kTransports[] = {"inproc", "ipc", "tcp", "shm", "fake"};

TEST_CASE("sync, async and ssp give the exact final weights over every transport") {
  for (const char* transport : kTransports) {
    for (Mode mode : {Mode::kSync, Mode::kAsync, Mode::kSsp}) {
      SUBCASE((std::string(transport) + " " + std::string(to_string(mode))).c_str()) {
        run_rounds(mode, 2, 3, 8, transport);
      }
    }
  }
}

TEST_CASE("shared memory with 1, 2, 4 and 8 workers x 1 and 2 servers, sync, async and ssp, exact final weights") {
  for (Mode mode : {Mode::kSync, Mode::kAsync, Mode::kSsp}) {
    for (int servers : {1, 2}) {
      for (int workers : {1, 2, 4, 8}) {
        CAPTURE(to_string(mode));
        CAPTURE(servers);
        CAPTURE(workers);
        run_rounds(mode, servers, workers, 10, "shm");
      }
    }
  }
}

TEST_CASE("the same cluster over tcp and ipc") {
  for (const char* transport : {"tcp", "ipc"}) {
    CAPTURE(transport);
    LocalClusterOptions o = options(Mode::kSync, 2, 2);
    o.transport = transport;
    LocalCluster cluster(o);
    zmq::context_t& ctx = cluster.zmq_context();  // inproc peers share the cluster's
    const ParamLayout layout = test_layout();
    run_workers(2, [&](int r) {
      WorkerSession session(std::make_unique<ZmqTransport>(ctx), cluster.worker_options(r), layout);
      std::vector<float> params(static_cast<std::size_t>(layout.total_elems()), 1.0f);
      session.broadcast_initial(params);
      std::vector<float> grad(params.size(), 2.0f);
      session.kv().wait(session.kv().pull(params, 0));
      session.kv().wait(session.kv().push(grad, 0, 0.5));
      session.kv().wait(session.kv().pull(params, 1));
      for (float x : params) CHECK(x == 0.0f);
      session.finish();
    });
    cluster.join();
  }
}
