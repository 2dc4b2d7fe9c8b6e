// Worker peers registered by hand against an in-process cluster (a scheduler
// and servers as threads over real tcp sockets, tools/cluster/local_cluster.h)
// for the elastic-membership tests that act out one order of events: a
// cluster with a ctl file, a peer's registration as a member, a joiner or a
// rejoiner, the wait for a change's announcement and its decision's key.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/config/job_fingerprint.h"
#include "common/node/scheduler_client.h"
#include "common/transport/zmq/zmq_transport.h"
#include "common/wire/protocol.h"
#include "tests/support/wait.h"
#include "tools/cluster/local_cluster.h"

namespace pstrain::test {

// A worker's wait for a change's decision: a deadlock shows as its timeout.
inline constexpr int kDecisionTimeoutMs = 20000;

// One server, `workers` workers over tcp, elastic up to `max_workers`, resize requests read from
// `ctl_file`; nobody is declared dead for silence (a test writes the exits file instead).
inline LocalClusterOptions elastic_options(const std::string& ctl_file, int max_workers = 2, int workers = 2) {
  LocalClusterOptions o;
  o.num_servers = 1;
  o.num_workers = workers;
  o.optimizer.momentum = 0.0;
  o.transport = "tcp";
  o.cluster.min_workers = 1;
  o.cluster.max_workers = max_workers;
  o.cluster.timeout_ms = kDecisionTimeoutMs;
  o.cluster.heartbeat_interval_ms = 50;
  o.cluster.heartbeat_timeout_ms = 60000;
  o.log_level = LogLevel::kDebug;  // the scheduler logs each barrier arrival: tests wait for it
  o.ctl_file = ctl_file;
  return o;
}

// How a peer registers: as a member at the rendezvous, as a joiner (the scheduler picks the slot), or as a rejoiner.
enum class Entry { kRegister, kJoin, kRejoin };

// A worker peer of rank `rank` in a job of `workers`, registered as `entry` says, as process `pid`.
inline std::unique_ptr<SchedulerClient> register_peer(LocalCluster& cluster, int rank, Entry entry = Entry::kRegister,
                                                      int workers = 2, std::int64_t pid = 0) {
  auto client = std::make_unique<SchedulerClient>(std::make_unique<ZmqTransport>(cluster.zmq_context()),
                                                  cluster.scheduler_endpoint(), Role::kWorker,
                                                  cluster.worker_options(rank).cluster, nullptr,
                                                  cluster.worker_options(rank).security);
  RegisterRequest req;
  req.requested_rank = entry == Entry::kJoin ? -1 : rank;
  req.host = "elastic test peer";
  req.pid = pid;
  req.job_fingerprint = job_fingerprint(Mode::kSync, std::int64_t{1} << 20, 1, workers);
  req.layout.add("w", {16});
  const RegisterReply reply = entry == Entry::kJoin     ? client->join_node(req)
                              : entry == Entry::kRejoin ? client->rejoin_node(req)
                                                        : client->register_node(req);
  if (reply.rank != rank) throw std::runtime_error("registered at another rank");
  return client;
}

// A --rejoin of `rank` as process `pid`, asked again while the scheduler says "retry later" (it has
// not noticed the failure yet, or a change is being decided), for at most a minute.
inline std::unique_ptr<SchedulerClient> rejoin_peer(LocalCluster& cluster, int rank, int workers, std::int64_t pid) {
  std::unique_ptr<SchedulerClient> client;
  wait_until([&] {
    try {
      client = register_peer(cluster, rank, Entry::kRejoin, workers, pid);
    } catch (const SchedulerRefusal& e) {
      if (!e.retryable()) throw;  // refused for good: the test's error
    }
    return client != nullptr;
  }, std::chrono::milliseconds(60000), "worker " + std::to_string(rank) + "'s rejoin");
  if (client == nullptr) throw std::runtime_error("worker " + std::to_string(rank) + " was not taken back");
  return client;
}

// Waits for the announcement of membership change `change` (and no other).
inline void wait_for_change(SchedulerClient& client, std::int64_t change, const std::string& who) {
  std::vector<std::int64_t> changes;
  const bool heard = wait_until([&] {
    client.drain_incoming();
    changes = client.take_membership_changes();
    return !changes.empty();
  }, std::chrono::milliseconds(60000), "change " + std::to_string(change) + "'s announcement at " + who);
  if (!heard || changes != std::vector<std::int64_t>{change}) {
    throw std::runtime_error("change " + std::to_string(change) + " was not announced to " + who);
  }
}

// The store key of change `change`'s decision.
inline std::string decision_key(int change = 1) { return std::string(kMembershipPrefix) + std::to_string(change); }

}  // namespace pstrain::test
