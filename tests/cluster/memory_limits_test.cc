// A server's memory budget for unsent replies (server/admission.h): the
// figure from cluster.memory_budget_mb or derived from the shard and the
// workers, and the warning for a configured one too small for the job.
#include <doctest/doctest.h>

#include <string>

#include "scheduler/scheduler_budget.h"
#include "server/admission.h"

using namespace pstrain;

TEST_CASE("server_memory_limits: derived from the shard and the workers unless configured") {
  ClusterConfig c;
  constexpr std::int64_t kMiB = std::int64_t{1} << 20;
  MemoryLimits l = server_memory_limits(c, 10 * kMiB, 3);
  CHECK(l.budget_bytes == kBudgetBaseBytes + kBudgetPerWorkerShards * 3 * 10 * kMiB);
  CHECK(l.stranger_bytes == kStrangerReplyBytes);
  CHECK(l.strangers_bytes == kStrangersPoolBytes);
  c.memory_budget_mb = 48;
  l = server_memory_limits(c, 10 * kMiB, 3);
  CHECK(l.budget_bytes == 48 * kMiB);
  CHECK(memory_budget_warning(c, 10 * kMiB, 2).empty());  // 48 >= 2 x 2 x 10
  const std::string w = memory_budget_warning(c, 10 * kMiB, 3);  // 48 < 60
  CHECK(w.find("cluster.memory_budget_mb = 48 is less than the 60 MiB") == 0);
  c.memory_budget_mb = 0;
  CHECK(memory_budget_warning(c, 1 << 30, 64).empty());  // derived: always enough
}

TEST_CASE("Admission::connections: the workers' connections as bound, rebinds included") {
  Admission a(nullptr);
  a.bind({"t0", "t1"});
  std::vector<PeerId> c = a.connections();
  REQUIRE(c.size() == 2);
  CHECK(c[0] == PeerId("wt0"));
  CHECK(c[1] == PeerId("wt1"));
  a.rebind(1, "u1");
  c = a.connections();
  REQUIRE(c.size() == 2);
  CHECK(c[0] == PeerId("wt0"));
  CHECK(c[1] == PeerId("wu1"));
}

TEST_CASE("scheduler_memory_limits: per node, plus twice the largest registration reply once known") {
  ClusterConfig c;
  constexpr std::int64_t kMiB = std::int64_t{1} << 20;
  MemoryLimits l = scheduler_memory_limits(c, 5, 0);
  CHECK(l.budget_bytes == kBudgetBaseBytes + 5 * kSchedulerBytesPerNode);
  CHECK(l.stranger_bytes == kStrangerReplyBytes);
  CHECK(l.strangers_bytes == kStrangersPoolBytes);
  l = scheduler_memory_limits(c, 5, 3 * kMiB);
  CHECK(l.budget_bytes == kBudgetBaseBytes + 5 * (kSchedulerBytesPerNode + 6 * kMiB));
  c.memory_budget_mb = 8;
  CHECK(scheduler_memory_limits(c, 5, 3 * kMiB).budget_bytes == 8 * kMiB);
  RegisterReply r;
  r.server_endpoints = {"tcp://127.0.0.1:1"};
  const std::int64_t none = largest_register_reply(r, {});
  CHECK(largest_register_reply(r, std::vector<std::string>(100, std::string(32, 'a'))) >= none + 100 * 32);
}
