// Admission::allows (server/admission.h), the sync queue's non-throwing
// question, answers as admit() does for every case admit() decides
// (CURVE off): a worker over its own connection, in another worker's name,
// from a connection no worker was given, a request from a non-worker, and
// after a rebind.
#include <doctest/doctest.h>

#include "server/admission.h"
#include "server/request_error.h"

using namespace pstrain;

namespace {

Envelope request(const std::string& connection, Role role, int sender) {
  Envelope e;
  e.from = PeerId(connection);
  e.message.header.type = MsgType::kPull;
  e.message.header.role = role;
  e.message.header.sender = sender;
  return e;
}

bool admits(const Admission& a, const Envelope& e) {
  try {
    a.admit(e);
    return true;
  } catch (const RequestError&) {
    return false;
  }
}

}  // namespace

TEST_CASE("admission: allows() agrees with admit()") {
  Admission a(nullptr);
  a.bind({"t0", "t1"});
  const Envelope cases[] = {
      request("wt0", Role::kWorker, 0),  // its own connection: admitted
      request("wt1", Role::kWorker, 1),
      request("wt1", Role::kWorker, 0),  // in worker 0's name on worker 1's connection
      request("stranger", Role::kWorker, 0),
      request("wt0", Role::kServer, 0),  // not a worker
      request("wt0", Role::kWorker, 7),
  };
  const bool expected[] = {true, true, false, false, false, false};
  for (std::size_t i = 0; i < std::size(cases); ++i) {
    CAPTURE(i);
    CHECK(admits(a, cases[i]) == expected[i]);
    CHECK(a.allows(cases[i]) == expected[i]);
  }
  a.rebind(1, "t9");  // a new process took rank 1: the old connection is refused
  CHECK_FALSE(a.allows(request("wt1", Role::kWorker, 1)));
  CHECK_FALSE(admits(a, request("wt1", Role::kWorker, 1)));
  CHECK(a.allows(request("wt9", Role::kWorker, 1)));
  CHECK(admits(a, request("wt9", Role::kWorker, 1)));
}
