// A request a server refuses: `status` goes into the error reply, the text
// says why. Thrown by the store and its consistency policy, caught by the
// server's event loop, which answers and goes on.
#pragma once

#include <string>

#include "common/base/errors.h"
#include "common/wire/protocol.h"

namespace pstrain {

class RequestError : public Error {
 public:
  RequestError(Status status, const std::string& what) : Error(what), status_(status) {}
  Status status() const { return status_; }

 private:
  Status status_;
};

}  // namespace pstrain
