// The scheduler's key/value store: the collectives' rendezvous and the
// epochs' members (worker/train/epoch_members.h). Pure: no sockets, no clock
// of its own (time is passed in); the scheduler sends what it decides.
//  - A set stores the value (overwriting) and hands back every get parked for
//    its key. Refused: a set of kLiveWorkersKey (answered by the scheduler
//    itself), and a new key once the store holds kMaxStoreEntries.
//  - A get of a set key is answered with its value; of kLiveWorkersKey, with
//    the live workers now (never stored); of an unset kEpochMembersPrefix key,
//    with the live workers now, which it fixes for every later get (even when
//    the store is full). Any other get of an unset key is parked until a set
//    of that key, or until its wait limit (Header::aux ms when positive, at
//    most cluster.timeout_ms), when expire() hands it back to be refused.
// Owned by the scheduler's thread (scheduler/scheduler.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/transport/transport.h"
#include "common/wire/protocol.h"

namespace pstrain {

class KvStore {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  // A get waiting for a key nobody has set yet.
  struct ParkedGet {
    PeerId routing_id;
    Header request;
    std::string key;
    std::int64_t wait_ms = 0;
    TimePoint deadline;
  };
  struct Answer {
    std::string value;
    bool fixed_epoch = false;  // this get fixed an epoch's members (the first ask for them)
  };

  // `timeout_ms`: the longest a get waits (cluster.timeout_ms).
  explicit KvStore(std::int64_t timeout_ms) : timeout_ms_(timeout_ms) {}

  // The answer to a get of `key`, or nullopt when nobody has set it yet (then
  // park() it). `live_workers` gives the live workers' ranks ("0,2,3"); it is
  // called only for the keys answered with them.
  std::optional<Answer> get(const std::string& key, const std::function<std::string()>& live_workers);
  // Parks `request` (a get of `key` from `from`) at `now`, until a set of
  // `key` or its wait limit.
  void park(const PeerId& from, const Header& request, const std::string& key, TimePoint now);
  // Throws ProtocolError when a set of `key` is refused.
  void check_set(const std::string& key) const;
  // Stores `value` under `key` (after check_set); returns the gets parked for
  // it, in arrival order, no longer parked.
  std::vector<ParkedGet> set(const std::string& key, std::string value);
  // The parked gets whose wait limit has passed at `now`, no longer parked.
  std::vector<ParkedGet> expire(TimePoint now);
  // Why an expired get is refused.
  static std::string expiry_reason(const ParkedGet& get);
  std::size_t parked() const { return parked_.size(); }
  std::size_t size() const { return values_.size(); }

 private:
  std::int64_t timeout_ms_;
  std::map<std::string, std::string> values_;
  std::vector<ParkedGet> parked_;
};

}  // namespace pstrain
