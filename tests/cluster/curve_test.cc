// security.mode = "curve" over real tcp sockets: the job's key files, and
// that a peer without a key the job admits gets nothing from a server or the
// scheduler (no reply, no push applied); the job itself trains as without
// curve.
#include <doctest/doctest.h>

#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <thread>

#include "common/config/config.h"
#include "common/base/errors.h"
#include "common/config/job_fingerprint.h"
#include "common/wire/job_secret.h"
#include "common/wire/security.h"
#include "common/wire/wire_archive.h"
#include "common/transport/transport.h"
#include "tools/cluster/local_cluster.h"
#include "common/transport/zmq/zmq_transport.h"
#include "common/transport/zmq/zmq_socket.h"
#include "tests/support/temp_dir.h"
#include "tests/support/throw_text.h"
#include "tests/support/wait.h"
#include "tests/support/stderr_capture.h"

using namespace pstrain;
using std::chrono::milliseconds;
namespace fs = std::filesystem;

namespace {

using KeyDir = pstrain::test::TempDir;

using pstrain::test::thrown_text;  // tests/support/throw_text.h

LocalClusterOptions curve_options(const fs::path& keys) {
  LocalClusterOptions o;
  o.num_servers = 1;
  o.num_workers = 1;
  o.optimizer.momentum = 0.0;
  o.transport = "tcp";
  o.cluster.timeout_ms = 10000;
  o.cluster.heartbeat_interval_ms = 50;
  o.cluster.heartbeat_timeout_ms = 3000;
  o.log_level = LogLevel::kError;
  o.key_dir = keys.string();
  return o;
}

ParamLayout layout_of(std::int64_t n) {
  ParamLayout layout;
  layout.add("w", {n});
  return layout;
}

// A DEALER that presents `client` (none: a plain socket) to a CURVE server
// with public key `server_public`, named `routing_id`.
zmq::socket_t outsider(zmq::context_t& ctx, const std::string& endpoint, const std::string& server_public,
                       const CurveKeyPair* client, const std::string& routing_id) {
  SecurityContext sec;
  if (client != nullptr) {
    sec.curve = true;
    sec.server_public_z85 = server_public;
    sec.client = *client;
  }
  SocketOptions options{std::int64_t{1} << 20, milliseconds(0), &sec};
  options.send_timeout = milliseconds(100);
  zmq::socket_t s = make_socket(ctx, zmq::socket_type::dealer, options);
  if (!routing_id.empty()) s.set(zmq::sockopt::routing_id, routing_id);
  connect_socket(s, endpoint);
  return s;
}

// Sends a push of +100 to chunk 0 at `step`, then a pull; true if anything
// at all came back within `wait`.
bool push_pull_gets_reply(zmq::socket_t& s, std::int64_t step, int rank, milliseconds wait) {
  static const std::vector<float> big(16, 100.0f);
  Header push;
  push.type = MsgType::kPush;
  push.role = Role::kWorker;
  push.sender = rank;
  push.key = 0;
  push.step = step;
  push.request_id = 1;
  Header pull = push;
  pull.type = MsgType::kPull;
  pull.request_id = 2;
  try {
    send_message(s, nullptr, push, Payload::floats(big));
    send_message(s, nullptr, pull);
  } catch (const TransportError&) {
    return false;  // not even queued: the handshake never completed
  }
  return receive_message(s, false, wait, DecodeLimits{}).has_value();
}

}  // namespace

TEST_CASE("pstrain-keygen's key files: private, complete, never silently replaced") {
  KeyDir dir;
  write_job_keys(dir.path() / "k", false);
  for (const char* name : kKeyFileNames) {
    CAPTURE(name);
    struct stat st{};
    REQUIRE(::stat((dir.path() / "k" / name).c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0600);
  }
  const CurveKeyPair worker = read_key_file(dir.path() / "k" / "worker.key", true);
  CHECK(worker.public_z85.size() == 40);
  CHECK(worker.secret_z85.size() == 40);
  CHECK(read_key_file(dir.path() / "k" / "worker.pub", false).public_z85 == worker.public_z85);
  CHECK(read_key_file(dir.path() / "k" / "worker.pub", false).secret_z85.empty());
  CHECK(thrown_text([&] { write_job_keys(dir.path() / "k", false); }).find("already exists") != std::string::npos);
  CHECK(read_key_file(dir.path() / "k" / "worker.key", true).secret_z85 == worker.secret_z85);  // untouched
  write_job_keys(dir.path() / "k", true);
  CHECK(read_key_file(dir.path() / "k" / "worker.key", true).secret_z85 != worker.secret_z85);

  // A missing file is a config error naming it; a file without its secret too.
  fs::remove(dir.path() / "k" / "worker.key");
  const SecurityConfig curve{"curve", (dir.path() / "k").string()};
  const std::string missing = thrown_text([&] { SecurityContext::load(curve, Role::kWorker); });
  CHECK(missing.find((dir.path() / "k" / "worker.key").string()) != std::string::npos);
  CHECK(missing.find("does not exist") != std::string::npos);
  fs::copy_file(dir.path() / "k" / "worker.pub", dir.path() / "k" / "worker.key");
  CHECK(thrown_text([&] { SecurityContext::load(curve, Role::kWorker); }).find("has no secret key") != std::string::npos);
  CHECK_THROWS_AS(SecurityContext::load(SecurityConfig{"curve", ""}, Role::kServer), ConfigError);
  // Mode off loads the job secret instead (tests/common/job_secret_test.cc).
  write_secret_file(dir.path() / "secret", generate_job_secret());
  CHECK_FALSE(SecurityContext::load(SecurityConfig{"off", "", (dir.path() / "secret").string()}, Role::kServer).curve);
}

TEST_CASE("[security] in the config: mode off or curve, anything else is an error at its line") {
  const RunConfig c = parse_config("[security]\nmode = \"curve\"\nkey_dir = \"/k\"\n", "s.toml");
  CHECK(c.security.mode == "curve");
  CHECK(c.security.key_dir == "/k");
  CHECK(parse_config("", "s.toml").security.mode == "off");
  const std::string bad = thrown_text([] { parse_config("[security]\nmode = \"tls\"\n", "s.toml"); });
  CHECK(bad.find("s.toml:2") != std::string::npos);
  CHECK(bad.find("security.mode") != std::string::npos);
  CHECK(thrown_text([] { parse_config("[security]\nkeys = \"/k\"\n", "s.toml"); }).find("security.keys") !=
        std::string::npos);
}

TEST_CASE("with curve on, a peer without a worker key gets nothing from a server and the job trains") {
  KeyDir keys;
  write_job_keys(keys.path(), false);
  KeyDir other;  // another job's keys
  write_job_keys(other.path(), false);
  const std::string bind_public = read_key_file(keys.path() / "bind.pub", false).public_z85;
  const CurveKeyPair stranger = read_key_file(other.path() / "worker.key", true);
  const CurveKeyPair server_client = read_key_file(keys.path() / "server.key", true);  // the job's, not a worker's
  const CurveKeyPair worker_client = read_key_file(keys.path() / "worker.key", true);

  LocalCluster cluster(curve_options(keys.path()));
  zmq::context_t& ctx = cluster.zmq_context();  // inproc peers share the cluster's
  WorkerSession session(std::make_unique<ZmqTransport>(ctx), cluster.worker_options(0), layout_of(16));
  std::vector<float> params(16, 1.0f);
  session.broadcast_initial(params);
  const std::string server = session.server_endpoints().at(0);
  // Without a key a peer gets nothing at all; with the worker key it would
  // get at least an error reply (the control below).
  const std::string stolen;

  SUBCASE("no key, another job's key, the servers' key: no reply, nothing applied") {
    zmq::socket_t plain = outsider(ctx, server, bind_public, nullptr, stolen);
    zmq::socket_t foreign = outsider(ctx, server, bind_public, &stranger, stolen);
    zmq::socket_t wrong_role = outsider(ctx, server, bind_public, &server_client, stolen);
    // wrong server key: the client cannot complete the handshake either
    zmq::socket_t wrong_server = outsider(ctx, server, stranger.public_z85, &worker_client, stolen);
    CHECK_FALSE(push_pull_gets_reply(plain, 0, 0, milliseconds(800)));
    CHECK_FALSE(push_pull_gets_reply(foreign, 0, 0, milliseconds(800)));
    CHECK_FALSE(push_pull_gets_reply(wrong_role, 0, 0, milliseconds(800)));
    CHECK_FALSE(push_pull_gets_reply(wrong_server, 0, 0, milliseconds(800)));
  }
  SUBCASE("control: the worker key reaches the server (refused only by the rank binding)") {
    zmq::socket_t keyed = outsider(ctx, server, bind_public, &worker_client, "");
    CHECK(push_pull_gets_reply(keyed, 0, 0, milliseconds(3000)));
  }

  // The weights are as worker 0 left them, and two real steps apply exactly.
  std::vector<float> now(16, 0.0f);
  session.kv().wait(session.kv().pull(now, 0));
  for (float x : now) CHECK(x == 1.0f);
  std::vector<float> grad(16, 1.0f);
  for (int step = 0; step < 2; ++step) {
    session.kv().wait(session.kv().pull(now, step));
    session.kv().wait(session.kv().push(grad, step, 0.5));
  }
  session.kv().wait(session.kv().pull(now, 2));
  for (float x : now) CHECK(x == 0.0f);
  session.finish();
  CHECK_NOTHROW(cluster.join());
}

TEST_CASE("with curve on, a forged abort from a peer without a job key never reaches the scheduler") {
  KeyDir keys;
  write_job_keys(keys.path(), false);
  KeyDir other;
  write_job_keys(other.path(), false);
  const std::string bind_public = read_key_file(keys.path() / "bind.pub", false).public_z85;
  const CurveKeyPair stranger = read_key_file(other.path() / "worker.key", true);
  LocalCluster cluster(curve_options(keys.path()));
  zmq::context_t& ctx = cluster.zmq_context();  // inproc peers share the cluster's
  WorkerSession session(std::make_unique<ZmqTransport>(ctx), cluster.worker_options(0), layout_of(16));
  std::vector<float> params(16, 1.0f);
  session.broadcast_initial(params);
  for (const CurveKeyPair* key : {static_cast<const CurveKeyPair*>(nullptr), &stranger}) {
    zmq::socket_t s = outsider(ctx, cluster.scheduler_endpoint(), bind_public, key, "");
    Header abort;
    abort.type = MsgType::kAbort;
    abort.role = Role::kWorker;
    abort.sender = 0;
    try {
      send_message(s, nullptr, abort, Payload::bytes("out of memory (forged)"));
    } catch (const TransportError&) {
    }
    CHECK_FALSE(receive_message(s, false, milliseconds(800), DecodeLimits{}).has_value());
  }
  session.kv().wait(session.kv().pull(params, 0));
  session.finish();
  CHECK_NOTHROW(cluster.join());
}

TEST_CASE("with curve on, a role is bound to its key: a worker's key cannot register as a server") {
  KeyDir keys;
  write_job_keys(keys.path(), false);
  const std::string bind_public = read_key_file(keys.path() / "bind.pub", false).public_z85;
  const CurveKeyPair worker_client = read_key_file(keys.path() / "worker.key", true);
  LocalClusterOptions o = curve_options(keys.path());
  o.log_level = LogLevel::kInfo;
  pstrain::test::StderrCapture log;  // the scheduler's log, to wait for the real server's registration
  LocalCluster cluster(o);
  zmq::context_t& ctx = cluster.zmq_context();  // inproc peers share the cluster's
  REQUIRE(pstrain::test::wait_until([&] { return log.has("registered server from"); }, milliseconds(30000),
                                     "the real server's registration"));
  zmq::socket_t s = outsider(ctx, cluster.scheduler_endpoint(), bind_public, &worker_client, "");
  RegisterRequest req;
  req.role = Role::kServer;
  req.requested_rank = 0;
  req.endpoint = "tcp://127.0.0.1:1";
  req.host = "impostor";
  req.job_fingerprint = job_fingerprint(Mode::kSync, o.partition_bytes, 1, 1);
  Header h;
  h.type = MsgType::kRegister;
  h.role = Role::kServer;
  h.sender = -1;
  send_message(s, nullptr, h, Payload::bytes(wire_encode(req)));
  const auto reply = receive_message(s, false, milliseconds(3000), DecodeLimits{});
  REQUIRE(reply.has_value());
  CHECK(reply->message.header.type == MsgType::kError);
  CHECK(reply->message.text_payload().find("a worker key cannot register as a server") != std::string::npos);
  // Refused, not fatal: the real job runs and ends normally.
  WorkerSession session(std::make_unique<ZmqTransport>(ctx), cluster.worker_options(0), layout_of(16));
  std::vector<float> params(16, 1.0f);
  session.broadcast_initial(params);
  session.finish();
  CHECK_NOTHROW(cluster.join());
}
