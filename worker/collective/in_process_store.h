// The rendezvous store for ranks that are threads of one process (tests,
// benchmarks). Thread-safe: any thread may set or get.
#pragma once

#include <condition_variable>
#include <map>
#include <mutex>
#include <string>

#include "worker/collective/rendezvous_store.h"

namespace pstrain {

class InProcessStore final : public RendezvousStore {
 public:
  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override;
  // How many get() calls are waiting for their key right now (lets a test
  // order a get before a set by an event instead of a sleep).
  int waiting() const;

 private:
  mutable std::mutex mutex_;
  int waiting_ = 0;
  std::condition_variable changed_;
  std::map<std::string, std::string> entries_;
};

}  // namespace pstrain
