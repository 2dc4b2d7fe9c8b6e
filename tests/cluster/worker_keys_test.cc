// Per-worker CURVE keys (pstrain-keygen --workers N, the launcher's
// RUN_DIR/keys): worker R holds worker-R.key, and the scheduler and servers
// take a registration or request in worker R's name only over a connection
// authenticated with that key. Over real tcp sockets.
#include <doctest/doctest.h>

#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <thread>

#include "common/base/errors.h"
#include "common/config/job_fingerprint.h"
#include "common/node/scheduler_client.h"
#include "common/wire/security.h"
#include "common/transport/transport.h"
#include "common/wire/wire_archive.h"
#include "tools/cluster/local_cluster.h"
#include "common/transport/zmq/zmq_transport.h"
#include "common/transport/zmq/zmq_socket.h"
#include "tests/support/temp_dir.h"
#include "tests/support/throw_text.h"

using namespace pstrain;
using std::chrono::milliseconds;
namespace fs = std::filesystem;

namespace {

using KeyDir = pstrain::test::TempDir;

using pstrain::test::thrown_text;  // tests/support/throw_text.h

ParamLayout layout_of(std::int64_t n) {
  ParamLayout layout;
  layout.add("w", {n});
  return layout;
}

LocalClusterOptions options_for(const fs::path& keys, int workers) {
  LocalClusterOptions o;
  o.num_servers = 1;
  o.num_workers = workers;
  o.optimizer.momentum = 0.0;
  o.transport = "tcp";
  o.cluster.timeout_ms = 10000;
  o.cluster.heartbeat_interval_ms = 50;
  o.cluster.heartbeat_timeout_ms = 5000;
  o.log_level = LogLevel::kError;
  o.key_dir = keys.string();
  return o;
}

// A DEALER presenting `key` to the job's CURVE servers, named `routing_id` (empty: ZeroMQ's).
zmq::socket_t keyed_socket(zmq::context_t& ctx, const std::string& endpoint, const fs::path& keys,
                           const std::string& key_file, const std::string& routing_id = "") {
  SecurityContext sec;
  sec.curve = true;
  sec.server_public_z85 = read_key_file(keys / "bind.pub", false).public_z85;
  sec.client = read_key_file(keys / key_file, true);
  SocketOptions options{std::int64_t{1} << 20, milliseconds(0), &sec};
  options.send_timeout = milliseconds(3000);
  zmq::socket_t s = make_socket(ctx, zmq::socket_type::dealer, options);
  if (!routing_id.empty()) s.set(zmq::sockopt::routing_id, routing_id);
  connect_socket(s, endpoint);
  return s;
}

RegisterRequest worker_request(int rank, int workers) {
  RegisterRequest req;
  req.role = Role::kWorker;
  req.requested_rank = rank;
  req.host = "test";
  req.job_fingerprint = job_fingerprint(Mode::kSync, std::int64_t{1} << 20, 1, workers);
  req.layout = layout_of(16);
  return req;
}

Header worker_header(MsgType type, int sender) {
  Header h;
  h.type = type;
  h.role = Role::kWorker;
  h.sender = sender;
  return h;
}

}  // namespace

TEST_CASE("pstrain-keygen --workers N: one private keypair per worker rank, and each worker loads its own") {
  KeyDir dir;
  write_job_keys(dir.path(), false, 3);
  std::vector<std::string> publics;
  for (int w = 0; w < 3; ++w) {
    for (const char* ext : {".key", ".pub"}) {
      const fs::path file = dir.path() / (worker_key_name(w) + ext);
      CAPTURE(file);
      struct stat st{};
      REQUIRE(::stat(file.c_str(), &st) == 0);
      CHECK((st.st_mode & 0777) == 0600);
    }
    publics.push_back(read_key_file(dir.path() / (worker_key_name(w) + ".pub"), false).public_z85);
  }
  CHECK(publics[0] != publics[1]);
  CHECK(publics[1] != publics[2]);
  CHECK_FALSE(fs::exists(dir.path() / "worker.key"));  // no shared key to steal
  const SecurityConfig curve{"curve", dir.path().string()};
  CHECK(SecurityContext::load(curve, Role::kWorker, 1).client.public_z85 == publics[1]);
  CHECK(thrown_text([&] { SecurityContext::load(curve, Role::kWorker); }).find("needs its rank") != std::string::npos);
  // The binding nodes admit each worker's key under its own name.
  for (const Role role : {Role::kScheduler, Role::kServer}) {
    const SecurityContext s = SecurityContext::load(curve, role);
    int workers = 0;
    for (const AllowedClient& a : s.allowed) {
      if (a.name.rfind("worker", 0) != 0) continue;
      CHECK(a.name == worker_key_name(workers));
      CHECK(a.public_z85 == publics[static_cast<std::size_t>(workers)]);
      ++workers;
    }
    CHECK(workers == 3);
  }
  // Existing files are never silently replaced; --force replaces them.
  CHECK(thrown_text([&] { write_job_keys(dir.path(), false, 3); }).find("already exists") != std::string::npos);
  write_job_keys(dir.path(), true, 3);
  CHECK(read_key_file(dir.path() / "worker-0.pub", false).public_z85 != publics[0]);
  // Whose key a ZAP user id names.
  CHECK(key_owner("worker-12")->rank == 12);
  CHECK(key_owner("worker")->rank == -1);
  CHECK(key_owner("server")->role == Role::kServer);
  CHECK_FALSE(key_owner("worker-").has_value());
  CHECK_FALSE(key_owner("worker-1x").has_value());
  CHECK_FALSE(key_owner("").has_value());
  // The shared layout still loads (any rank uses worker.key).
  KeyDir shared;
  write_job_keys(shared.path(), false);
  const SecurityConfig old{"curve", shared.path().string()};
  CHECK(SecurityContext::load(old, Role::kWorker, 1).client.public_z85 ==
        read_key_file(shared.path() / "worker.pub", false).public_z85);
}

TEST_CASE("per-worker keys: worker-1's key can neither register as rank 0 nor push in worker 0's name") {
  KeyDir keys;
  write_job_keys(keys.path(), false, 2);
  const LocalClusterOptions o = options_for(keys.path(), 2);
  LocalCluster cluster(o);
  zmq::context_t& ctx = cluster.zmq_context();  // inproc peers share the cluster's

  // 1. A peer holding worker-1.key registers as rank 0: refused at once.
  {
    zmq::socket_t s = keyed_socket(ctx, cluster.scheduler_endpoint(), keys.path(), "worker-1.key");
    send_message(s, nullptr, worker_header(MsgType::kRegister, -1), Payload::bytes(wire_encode(worker_request(0, 2))));
    auto env = receive_message(s, false, milliseconds(3000), DecodeLimits{});
    REQUIRE(env.has_value());
    CHECK(env->message.header.type == MsgType::kError);
    CHECK(env->message.text_payload().find("a worker-1 key cannot register as worker rank 0") != std::string::npos);
  }

  // 2. The real workers register by hand, each with its own key (worker 1
  // asks for no rank: its key gives it rank 1).
  const ClusterConfig cluster_config = o.cluster;
  const SecurityConfig curve{"curve", keys.path().string()};
  const SecurityContext key0 = SecurityContext::load(curve, Role::kWorker, 0);
  const SecurityContext key1 = SecurityContext::load(curve, Role::kWorker, 1);
  SchedulerClient sc0(std::make_unique<ZmqTransport>(ctx), cluster.scheduler_endpoint(), Role::kWorker, cluster_config, nullptr, &key0);
  SchedulerClient sc1(std::make_unique<ZmqTransport>(ctx), cluster.scheduler_endpoint(), Role::kWorker, cluster_config, nullptr, &key1);
  RegisterReply info0;
  std::thread first([&] { info0 = sc0.register_node(worker_request(-1, 2)); });
  const RegisterReply info1 = sc1.register_node(worker_request(-1, 2));
  first.join();
  CHECK(info0.rank == 0);
  CHECK(info1.rank == 1);

  // 3. Worker 1's key on a connection named with worker 0's own token (as if
  // the token had leaked): the token binding alone would take it; the key
  // binding refuses the push, and the pull, in worker 0's name.
  const std::string server = info1.server_endpoints.at(0);
  {
    zmq::socket_t s = keyed_socket(ctx, server, keys.path(), "worker-1.key", "w" + sc0.token());
    Header push = worker_header(MsgType::kPush, 0);
    push.key = 0;
    push.lr = 1.0;
    const std::vector<float> huge(16, 100.0f);
    for (const MsgType type : {MsgType::kPush, MsgType::kPull}) {
      CAPTURE(to_string(type));
      push.type = type;
      send_message(s, nullptr, push, type == MsgType::kPush ? Payload::floats(huge) : Payload());
      auto env = receive_message(s, false, milliseconds(3000), DecodeLimits{});
      REQUIRE(env.has_value());
      CHECK(env->message.header.type == MsgType::kError);
      CHECK(env->message.text_payload().find("claiming to be worker 0 over a connection authenticated with the "
                                             "worker-1 key: refused") != std::string::npos);
    }
  }
  std::this_thread::sleep_for(milliseconds(200));  // the name "w" + token is free again

  // 4. Control: worker 0's own key on its own connection is served, and the
  // forged push changed nothing (init to ones, pull: still ones).
  {
    zmq::socket_t s = keyed_socket(ctx, server, keys.path(), "worker-0.key", "w" + sc0.token());
    const std::vector<float> ones(16, 1.0f);
    Header init = worker_header(MsgType::kInit, 0);
    init.key = 0;
    send_message(s, nullptr, init, Payload::floats(ones));
    auto env = receive_message(s, false, milliseconds(3000), DecodeLimits{});
    REQUIRE(env.has_value());
    CHECK(env->message.header.type == MsgType::kInitReply);
    Header pull = worker_header(MsgType::kPull, 0);
    pull.key = 0;
    send_message(s, nullptr, pull);
    env = receive_message(s, false, milliseconds(3000), DecodeLimits{});
    REQUIRE(env.has_value());
    REQUIRE(env->message.header.type == MsgType::kPullReply);
    CHECK(env->message.header.version == 0);
    std::vector<float> scratch;
    for (const float x : env->message.float_payload(scratch)) CHECK(x == 1.0f);
  }
  std::thread done0([&] { sc0.finish(); });  // finish waits for the job's end: both at once
  sc1.finish();
  done0.join();
  CHECK_NOTHROW(cluster.join());
}

TEST_CASE("per-worker keys through the local cluster: each worker session uses its own key and the job trains") {
  KeyDir keys;
  write_job_keys(keys.path(), false, 2);
  LocalCluster cluster(options_for(keys.path(), 2));
  zmq::context_t& ctx = cluster.zmq_context();  // inproc peers share the cluster's
  CHECK(thrown_text([&] { (void)cluster.worker_options(-1); }).find("needs a rank") != std::string::npos);
  auto train = [&](int rank) {
    WorkerSession session(std::make_unique<ZmqTransport>(ctx), cluster.worker_options(rank), layout_of(16));
    std::vector<float> params(16, 1.0f);
    session.broadcast_initial(params);
    std::vector<float> grad(16, 1.0f);
    for (int step = 0; step < 2; ++step) {
      session.kv().wait(session.kv().pull(params, step));
      session.kv().wait(session.kv().push(grad, step, 0.5));
    }
    session.kv().wait(session.kv().pull(params, 2));
    for (const float x : params) CHECK(x == 0.0f);
    session.finish();
  };
  std::thread other([&] { train(1); });
  train(0);
  other.join();
  CHECK_NOTHROW(cluster.join());
}
