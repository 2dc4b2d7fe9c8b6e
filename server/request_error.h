// A request a server refuses: `status` goes into the error reply, the text
// says why. Thrown by the store and its consistency policy, caught by the
// server's event loop, which answers and goes on.
// A push refused for its own values (its learning rate, a NaN or Inf in its
// gradient or in the update it would make) names the pusher: `blamed` is its
// worker rank (-1 for every other refusal), which the store counts and the
// server logs as a warning (ShardStore::take_refusals), so a poisoner is
// reported, not the workers it would have hurt.
#pragma once

#include <string>

#include "common/base/errors.h"
#include "common/wire/protocol.h"

namespace pstrain {

class RequestError : public Error {
 public:
  RequestError(Status status, const std::string& what, int blamed = -1)
      : Error(what), status_(status), blamed_(blamed) {}
  Status status() const { return status_; }
  int blamed() const { return blamed_; }

 private:
  Status status_;
  int blamed_;
};

}  // namespace pstrain
