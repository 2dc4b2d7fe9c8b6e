// The scheduler's half of admission in security mode "off" (common/wire/
// job_secret.h): a nonce for every kChallenge, and the answer checked on
// every registration, rejoin and server rejoin before anything else is. A
// peer without the job's secret is refused with the reason and takes no
// slot; the job goes on. With CURVE (keys admit) or without a job secret
// (in-process use) there is no gate: a kChallenge gets an empty nonce, and
// registrations are taken as before.
#include <string>

#include "common/base/errors.h"
#include "common/wire/wire_archive.h"
#include "scheduler/scheduler.h"

namespace pstrain {

std::optional<RegistrationGate> Scheduler::make_gate(const SecurityContext* security) {
  if (security == nullptr || security->curve || security->job_secret.empty()) return std::nullopt;
  return RegistrationGate(security->job_secret);
}

namespace {
std::int64_t clock_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(SchedulerClock::now().time_since_epoch()).count();
}
}  // namespace

void Scheduler::on_challenge(const PeerId& from, const Message& msg) {
  Header h;
  h.type = MsgType::kChallenge;
  h.role = Role::kScheduler;
  h.sender = 0;
  h.request_id = msg.header.request_id;
  send_quietly(from, h, Payload::bytes(gate_ ? gate_->challenge(from.bytes(), clock_ms()) : std::string()));
}

void Scheduler::check_answer(const PeerId& from, const RegisterRequest& req, const std::string& what) {
  if (!gate_) return;
  RegisterRequest answered = req;  // what the node answered for: the request with an empty proof
  answered.proof.clear();
  try {
    gate_->check(from.bytes(), req.challenge, req.proof, wire_encode(answered), clock_ms(), options_.cluster.timeout_ms);
  } catch (const ProtocolError& e) {
    throw ProtocolError(what + ": refused a " + std::string(to_string(req.role)) + " from " + req.host + " (pid " +
                        std::to_string(req.pid) + "): " + e.what());
  }
}

}  // namespace pstrain
