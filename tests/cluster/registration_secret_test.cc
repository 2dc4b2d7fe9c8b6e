// The in-process cluster under security mode "off" uses the node programs'
// admission: a job secret it generates, answered at registration. A worker
// with another secret, or none, takes no slot; the job's own then trains.
// (Real processes: tests/integration/admission_run_test.cc.)
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "common/base/errors.h"
#include "common/node/scheduler_client.h"
#include "common/transport/zmq/zmq_transport.h"
#include "common/wire/job_secret.h"
#include "tests/support/throw_text.h"
#include "tools/cluster/local_cluster.h"
#include "worker/client/worker_session.h"

using namespace pstrain;

namespace {

ParamLayout layout_of(std::int64_t n) {
  ParamLayout layout;
  layout.add("w", {n});
  return layout;
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("in-process cluster, security off: a worker without the job's secret is refused; the job's worker trains") {
  LocalClusterOptions o;
  o.num_servers = 1;
  o.num_workers = 1;
  o.optimizer.momentum = 0.0;
  o.transport = "tcp";
  o.cluster.timeout_ms = 10000;
  o.cluster.heartbeat_interval_ms = 50;
  o.cluster.heartbeat_timeout_ms = 2000;
  LocalCluster cluster(o);
  REQUIRE(cluster.job_secret().size() == kJobSecretBytes);
  zmq::context_t& ctx = cluster.zmq_context();

  SecurityContext other;  // another job's secret
  other.job_secret = generate_job_secret();
  for (const SecurityContext* security : std::vector<const SecurityContext*>{&other, nullptr}) {
    WorkerSessionOptions stranger = cluster.worker_options(0);
    stranger.security = security;
    const std::string refused = test::thrown_text<SchedulerRefusal>(
        [&] { WorkerSession session(std::make_unique<ZmqTransport>(ctx), stranger, layout_of(16)); });
    CAPTURE(refused);
    CHECK(has(refused, "register: refused a worker from "));
    CHECK(has(refused, security != nullptr ? "wrong answer to the job's challenge" : "no answer to the job's challenge"));
  }

  WorkerSession session(std::make_unique<ZmqTransport>(ctx), cluster.worker_options(0), layout_of(16));
  std::vector<float> params(16, 1.0f);
  session.broadcast_initial(params);
  const std::vector<float> grad(16, 1.0f);
  session.kv().wait(session.kv().pull(params, 0));
  session.kv().wait(session.kv().push(grad, 0, 0.5));
  session.kv().wait(session.kv().pull(params, 1));
  for (const float x : params) CHECK(x == 0.5f);
  session.finish();
  CHECK_NOTHROW(cluster.join());
}
