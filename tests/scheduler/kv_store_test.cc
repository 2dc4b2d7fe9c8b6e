// scheduler/kv_store.h without sockets: values, overwrites, parked gets and
// their wait limits, the keys the scheduler answers itself, a full store.
#include <doctest/doctest.h>

#include <chrono>
#include <string>

#include "common/base/errors.h"
#include "scheduler/kv_store.h"

using namespace pstrain;
using std::chrono::milliseconds;

namespace {

const KvStore::TimePoint kT0{std::chrono::seconds(1000)};

Header get_request(std::int64_t request_id, std::int64_t aux = 0) {
  Header h;
  h.type = MsgType::kStoreGet;
  h.role = Role::kWorker;
  h.sender = 1;
  h.request_id = static_cast<decltype(h.request_id)>(request_id);
  h.aux = static_cast<decltype(h.aux)>(aux);
  return h;
}

std::function<std::string()> live(const std::string& ranks, int* calls = nullptr) {
  return [ranks, calls] {
    if (calls != nullptr) ++*calls;
    return ranks;
  };
}

}  // namespace

TEST_CASE("kv store: a set key is answered; a set overwrites it") {
  KvStore store(1000);
  CHECK_FALSE(store.get("k", live("0")));
  CHECK(store.set("k", "one").empty());
  REQUIRE(store.get("k", live("0")));
  CHECK(store.get("k", live("0"))->value == "one");
  store.set("k", "two");
  CHECK(store.get("k", live("0"))->value == "two");
  CHECK(store.size() == 1);
}

TEST_CASE("kv store: a parked get is handed back by a set of its key, in arrival order; others stay") {
  KvStore store(1000);
  store.park(PeerId("a"), get_request(1), "k", kT0);
  store.park(PeerId("b"), get_request(2), "other", kT0);
  store.park(PeerId("c"), get_request(3), "k", kT0);
  CHECK(store.parked() == 3);
  const auto waiting = store.set("k", "v");
  REQUIRE(waiting.size() == 2);
  CHECK(waiting[0].routing_id == PeerId("a"));
  CHECK(waiting[1].routing_id == PeerId("c"));
  CHECK(waiting[1].request.request_id == 3u);
  CHECK(store.parked() == 1);
  CHECK(store.set("k", "again").empty());  // handed back once
}

TEST_CASE("kv store: a parked get waits its own limit (aux), at most timeout_ms, and expires at its deadline") {
  KvStore store(1000);
  store.park(PeerId("short"), get_request(1, 50), "k", kT0);
  store.park(PeerId("long"), get_request(2, 5000), "k", kT0);   // capped at timeout_ms
  store.park(PeerId("default"), get_request(3, 0), "k", kT0);   // no limit of its own: timeout_ms
  CHECK(store.expire(kT0 + milliseconds(49)).empty());
  auto expired = store.expire(kT0 + milliseconds(50));  // exactly at the deadline
  REQUIRE(expired.size() == 1);
  CHECK(expired[0].wait_ms == 50);
  CHECK(KvStore::expiry_reason(expired[0]) == "store get of key 'k' from worker 1: no node set it within 50 ms");
  CHECK(store.expire(kT0 + milliseconds(999)).empty());
  expired = store.expire(kT0 + milliseconds(1000));
  REQUIRE(expired.size() == 2);
  CHECK(expired[0].wait_ms == 1000);
  CHECK(expired[1].wait_ms == 1000);
  CHECK(store.parked() == 0);
}

TEST_CASE("kv store: the live workers key is answered from the membership each time, never stored or set") {
  KvStore store(1000);
  int calls = 0;
  CHECK(store.get(std::string(kLiveWorkersKey), live("0,1", &calls))->value == "0,1");
  CHECK(store.get(std::string(kLiveWorkersKey), live("0", &calls))->value == "0");
  CHECK(calls == 2);
  CHECK(store.size() == 0);
  CHECK_THROWS_AS(store.check_set(std::string(kLiveWorkersKey)), ProtocolError);
  CHECK_FALSE(store.get("other", live("0", &calls)));
  CHECK(calls == 2);  // asked only for the keys it answers
}

TEST_CASE("kv store: the first get of an epoch's members fixes them for every later get") {
  KvStore store(1000);
  const std::string key = std::string(kEpochMembersPrefix) + "3";
  auto first = store.get(key, live("0,1,2"));
  REQUIRE(first);
  CHECK(first->value == "0,1,2");
  CHECK(first->fixed_epoch);
  auto later = store.get(key, live("0,2"));  // worker 1 dropped since
  REQUIRE(later);
  CHECK(later->value == "0,1,2");
  CHECK_FALSE(later->fixed_epoch);
}

TEST_CASE("kv store: a full store refuses a new key, takes an overwrite, and still fixes epochs") {
  KvStore store(1000);
  for (std::size_t i = 0; i < kMaxStoreEntries; ++i) {
    const std::string key = std::string("k").append(std::to_string(i));
    store.check_set(key);
    store.set(key, "v");
  }
  CHECK_THROWS_WITH_AS(store.check_set("new"), "store set of key 'new': the store is full (4096 keys)", ProtocolError);
  CHECK_NOTHROW(store.check_set("k0"));
  const auto epoch = store.get(std::string(kEpochMembersPrefix) + "0", live("0"));
  REQUIRE(epoch);
  CHECK(epoch->value == "0");
  CHECK(store.size() == kMaxStoreEntries + 1);
}
