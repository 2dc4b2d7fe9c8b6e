// The rendezvous store kept by the job's scheduler (kStoreSet / kStoreGet,
// common/wire/protocol.h): works for ranks on any machine that reaches the
// scheduler. A get that waits keeps the scheduler link's thread blocked
// (heartbeats go on from their own thread); an abort of the job arriving
// meanwhile raises AbortedError.
// Not thread-safe: use it from the thread that owns the SchedulerClient.
#pragma once

#include "common/node/scheduler_client.h"
#include "worker/collective/rendezvous_store.h"

namespace pstrain {

class SchedulerStore final : public RendezvousStore {
 public:
  explicit SchedulerStore(SchedulerClient& client) : client_(client) {}

  void set(const std::string& key, const std::string& value) override { client_.store_set(key, value); }
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override;

 private:
  SchedulerClient& client_;
};

}  // namespace pstrain
