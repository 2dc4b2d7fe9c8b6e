// A key-value store that every rank of a job reaches: the collectives'
// rendezvous (Gloo's peer addresses, NCCL's unique id). Two kinds:
// SchedulerStore (worker/collective/scheduler_store.h: the scheduler keeps it,
// works across machines) and InProcessStore (threads of one process: tests,
// benchmarks).
// Keys have 1..kMaxStoreKeyBytes bytes, values at most kMaxStoreValueBytes
// (common/wire/protocol.h); others raise ProtocolError naming the key.
#pragma once

#include <chrono>
#include <string>

namespace pstrain {

class RendezvousStore {
 public:
  virtual ~RendezvousStore() = default;
  // Sets `key` (a later set replaces the value).
  virtual void set(const std::string& key, const std::string& value) = 0;
  // The value of `key`, waiting until some rank has set it, at most `timeout`
  // (then TimeoutError or TransportError saying which key).
  virtual std::string get(const std::string& key, std::chrono::milliseconds timeout) = 0;
};

}  // namespace pstrain
