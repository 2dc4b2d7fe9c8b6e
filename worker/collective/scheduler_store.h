// The rendezvous store kept by the job's scheduler (kStoreSet / kStoreGet,
// common/wire/protocol.h): works for ranks on any machine that reaches the
// scheduler. A get that waits keeps the scheduler link's thread blocked
// (heartbeats go on from their own thread); an abort of the job arriving
// meanwhile raises AbortedError, and a watch (set_watch) may end it.
// Not thread-safe: use it from the thread that owns the SchedulerClient.
#pragma once

#include <functional>
#include <utility>

#include "common/node/scheduler_client.h"
#include "worker/collective/rendezvous_store.h"

namespace pstrain {

class SchedulerStore final : public RendezvousStore {
 public:
  explicit SchedulerStore(SchedulerClient& client) : client_(client) {}

  void set(const std::string& key, const std::string& value) override { client_.store_set(key, value); }
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override;
  // Called while a get waits (SchedulerClient::store_get with a watch): a
  // throw ends the get with it. Empty: none. An allreduce worker watches for
  // the drop of a member of the collective it forms (allreduce_node.cc).
  void set_watch(std::function<void()> watch) { watch_ = std::move(watch); }

 private:
  SchedulerClient& client_;
  std::function<void()> watch_;
};

}  // namespace pstrain
