// Typed errors. Messages name the operation and the offending values, e.g.
// "push of chunk 17 from worker 3: expected 4096 bytes, got 4092".
// Only main() turns an exception into an exit code; libraries throw.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace pstrain {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A config file or flag is wrong: names file, line and key where known.
class ConfigError : public Error { using Error::Error; };
// Wire data broke a rule of the protocol (bad frame count, version, size...).
class ProtocolError : public Error { using Error::Error; };
// A socket or peer failed (connect, send, receive, peer reported failure).
class TransportError : public Error { using Error::Error; };
// A server answered a request with an error status (common/wire/protocol.h
// Status: rejected, not owner, bad request, aborted): the status and the
// server's rank travel with it, so the worker decides retry, drop or abort on
// what happened, not on the text. A TransportError, so code that only cares
// that a request failed still catches it.
enum class Status : std::uint8_t;  // common/wire/protocol.h
class ServerError : public TransportError {
 public:
  ServerError(Status status, int server_rank, const std::string& what)
      : TransportError(what), status_(status), server_(server_rank) {}
  Status status() const { return status_; }
  int server() const { return server_; }

 private:
  Status status_;
  int server_;
};
// A request refused for now that may be granted later (the scheduler answers
// it with Status kRetryLater: a rejoin while the rank it takes back still
// counts as alive); a plain ProtocolError is refused for good (kRefused).
class RetryLaterError : public ProtocolError { using ProtocolError::ProtocolError; };
// A blocking wait ran past its timeout; the message says what it waited for.
class TimeoutError : public Error { using Error::Error; };
// A compute backend or numeric check failed (shape mismatch, NaN, CUDA error).
class ComputeError : public Error { using Error::Error; };
// A data file is missing, truncated or malformed; names the file.
class DataError : public Error { using Error::Error; };
// The job was aborted by the scheduler (a peer failed); carries its reason.
class AbortedError : public Error { using Error::Error; };
// Training diverged: a worker saw a non-finite loss, gradient or weight. A
// training outcome, not a crash: its own exit code (kExitDiverged) and one
// line naming the worker, step, learning rate and what to try.
class DivergedError : public Error { using Error::Error; };

// Exit codes of the role programs and of `launch`.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;
inline constexpr int kExitAborted = 2;   // the scheduler aborted the job (a peer failed)
inline constexpr int kExitConfig = 3;    // a config error, before anything ran
inline constexpr int kExitDiverged = 4;  // training diverged (DivergedError)

}  // namespace pstrain
