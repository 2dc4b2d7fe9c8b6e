// Transport security: ZeroMQ CURVE (authenticated, encrypted connections)
// and the ZAP handler that decides which clients a binding node accepts.
//
// The job's keys live in one directory (security.key_dir), written by
// pstrain-keygen (or by the launcher into RUN_DIR/keys):
//
//   bind.key    bind.pub     the keypair of every binding node: the scheduler
//                            and the servers are CURVE servers with it
//   server.key  server.pub   the servers' client keypair (servers -> scheduler)
//   worker-R.key worker-R.pub  worker rank R's own client keypair (workers ->
//                            scheduler, workers -> servers), one per worker:
//                            pstrain-keygen --workers N, and the launcher
//   worker.key  worker.pub   or one client keypair shared by every worker (the
//                            layout before per-worker keys; still accepted)
//
// With per-worker keys the ZAP handler names a worker's connection by its
// key ("worker-R", the ZAP user id), and the scheduler and servers take a
// registration or request in worker R's name only over a connection
// authenticated with worker-R's key: a stolen worker key acts as that one
// worker only. With the shared key any worker key holder can register as
// any free worker rank (the session-token binding still stops it acting as
// a rank another connection registered).
//
// *.key hold "public = <Z85>" and "secret = <Z85>" lines (mode 0600), *.pub
// only the public line. The scheduler accepts clients holding server or
// worker keys; a server accepts worker keys only. A node reads only the files
// its role needs (SecurityContext::load), so a worker machine needs bind.pub,
// worker.key; a server machine bind.key, bind.pub, server.key, worker.pub;
// the scheduler's bind.key, server.pub, worker.pub.
//
// No process-wide state: a SecurityContext is a value each node builds from
// its config and passes to its transport's endpoints (SocketOptions::security);
// a ZapHandler (Transport::authenticate) belongs to one binding node. The
// ZeroMQ side (CURVE socket options, the ZAP handler serving a context) is
// the ZeroMQ transport's: common/transport/zmq/zmq_curve.h.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/config/config.h"
#include "common/base/log.h"
#include "common/wire/protocol.h"

namespace pstrain {

// A CURVE keypair, both halves as 40-character Z85 text.
struct CurveKeyPair {
  std::string public_z85;
  std::string secret_z85;
};

CurveKeyPair generate_curve_keypair();  // Error if libzmq lacks CURVE

// A client public key a binding node accepts, and the name it is known by
// ("worker", "server"; the ZAP user id).
struct AllowedClient {
  std::string name;
  std::string public_z85;
};

// The key files (see above). Names only, relative to the key dir.
inline constexpr const char* kKeyFileNames[] = {"bind.key", "bind.pub", "server.key",
                                                "server.pub", "worker.key", "worker.pub"};

// Writes a fresh set of the job's key files into `dir` (created if missing;
// files 0600). Refuses (Error naming the file) to overwrite an existing one
// unless `force`.
// num_workers > 0: one keypair per worker rank (worker-R.key/.pub, R <
// num_workers) instead of the shared worker.key/.pub.
void write_job_keys(const std::filesystem::path& dir, bool force, int num_workers = 0);

// "worker-R": the key file stem and ZAP user id of worker rank R's own key.
std::string worker_key_name(int rank);

// Whose key a ZAP user id names: the role, and for a per-worker key the
// worker's rank (-1: a key shared by the role). Nullopt for anything else
// (no user id: security off).
struct KeyOwner {
  Role role = Role::kWorker;
  int rank = -1;
};
std::optional<KeyOwner> key_owner(std::string_view user_id);

// Reads a key file: the keypair (*.key) or only the public half (*.pub,
// secret empty). ConfigError naming the file when it is missing, unreadable
// or malformed.
CurveKeyPair read_key_file(const std::filesystem::path& path, bool need_secret);

// What a node's sockets need. Default: mode off, sockets stay plain, and
// registration open to anyone (no job secret: in-process use only; the node
// programs always load one in mode off).
struct SecurityContext {
  bool curve = false;
  // Mode off: the job's secret (common/wire/job_secret.h): the scheduler
  // admits a registration only with a right answer to its challenge, and a
  // node answers with it. Empty: no challenge (curve's keys admit instead).
  std::string job_secret;
  // Binding sockets (ROUTER: scheduler, servers): the CURVE server keypair.
  CurveKeyPair bind;
  // Connecting sockets (DEALER): the bind public key they expect, and their own keypair.
  std::string server_public_z85;
  CurveKeyPair client;
  // Who this node's binding socket admits (its ZapHandler's list).
  std::vector<AllowedClient> allowed;

  // Off: the job secret from config.secret_file, else the file named by
  // $PSTRAIN_SECRET_FILE (ConfigError naming the key when neither is set, or
  // the file when it cannot be used: read_secret_file). Curve: the files
  // `role` needs from config.key_dir (ConfigError naming a
  // missing or unreadable file; ConfigError when key_dir is empty). A
  // worker of rank `rank` uses worker-<rank>.key when the dir has per-worker
  // keys, else the shared worker.key; the scheduler and servers admit every
  // worker-R.pub (R = 0, 1, ... while present) and worker.pub if present.
  static SecurityContext load(const SecurityConfig& config, Role role, int rank = -1);
};

// The 32 bytes a Z85 CURVE key stands for; empty when the text is not one.
std::string curve_key_bytes(const std::string& z85);

// A binding node's authenticator (Transport::authenticate makes it): decides
// which CURVE clients its Listener admits, those whose public key is in the
// SecurityContext's allowed list (the ZeroMQ transports':
// common/transport/zmq/zmq_curve.h). Keep it alive while the Listener is.
class ZapHandler {
 public:
  virtual ~ZapHandler() = default;
  // Handshakes admitted and refused so far.
  virtual std::int64_t accepted() const = 0;
  virtual std::int64_t refused() const = 0;
};

}  // namespace pstrain
