// Admission without encryption (security.mode = "off"): a per-job secret and
// a challenge-response at registration, so that a peer that can reach the
// scheduler's port but holds no secret of the job cannot take a slot.
//
// The secret: 32 random bytes, written by `launch` into RUN_DIR/secret (or
// by `pstrain-keygen --secret FILE`) as one line of 64 hex digits, mode 0600.
// Every node of the job reads it (security.secret_file, else the file named
// by $PSTRAIN_SECRET_FILE); it never travels on a command line or the wire.
//
// The exchange (common/node/scheduler_client.cc, scheduler/rejoin.cc):
//   node -> scheduler   kChallenge, no payload: "give me a nonce"
//   scheduler -> node   kChallenge, payload = a nonce (RegistrationGate)
//   node -> scheduler   kRegister, RegisterRequest{..., challenge = the
//                       nonce, proof = HMAC-SHA256(secret, tag | nonce |
//                       the request encoded with an empty proof)}
// The scheduler admits the registration only if the proof is right, the
// nonce is one it issued to that connection less than max_age ago, and no
// registration answered that nonce before (a replayed answer is refused).
// The nonce carries its own issue time and a MAC under a key only this
// scheduler holds, so a stranger's flood of challenge requests costs the
// scheduler no memory; only nonces answered with a correct proof are
// remembered (at most one per registration of the job's own nodes).
//
// What it does not do: encrypt. A peer that can read the traffic sees the
// session tokens that later bind connections and can act in a node's name;
// use security.mode = "curve" on a network shared with anyone outside the job.
#pragma once

#include <cstdint>
#include <filesystem>
#include <set>
#include <string>
#include <string_view>

namespace pstrain {

inline constexpr std::size_t kJobSecretBytes = 32;
// The environment variable naming the secret file when security.secret_file is empty.
inline constexpr const char* kSecretFileEnv = "PSTRAIN_SECRET_FILE";

// kJobSecretBytes random bytes (libsodium's randombytes).
std::string generate_job_secret();
// Writes `secret` into `path` as 64 hex digits (mode 0600, replacing any
// file there). Error naming the file when it cannot.
void write_secret_file(const std::filesystem::path& path, const std::string& secret);
// Reads a secret file: ConfigError naming it when it is missing, readable by
// other users (group or others permission bits set), or not 64 hex digits.
std::string read_secret_file(const std::filesystem::path& path);

// The node's answer to `nonce`: HMAC-SHA256 keyed with `secret` over a fixed
// tag, the nonce and `request_bytes` (the RegisterRequest encoded with its
// challenge set and its proof empty). Error when `secret` is not a job secret.
std::string answer_challenge(std::string_view secret, std::string_view nonce, std::string_view request_bytes);

// The scheduler's side: issues nonces and checks answers. Owned by the
// scheduler's thread.
class RegistrationGate {
 public:
  // Error when `secret` is not kJobSecretBytes long.
  explicit RegistrationGate(std::string secret);

  // A nonce for connection `peer` at `now_ms` (any monotonic clock in ms).
  std::string challenge(std::string_view peer, std::int64_t now_ms) const;
  // Throws ProtocolError with the reason unless `proof` answers `nonce`
  // (issued by this gate to `peer` at most `max_age_ms` before `now_ms`, not
  // answered before) for `request_bytes`. A correct answer uses the nonce up.
  void check(std::string_view peer, std::string_view nonce, std::string_view proof, std::string_view request_bytes,
             std::int64_t now_ms, std::int64_t max_age_ms);
  // Nonces answered so far (each admitted registration's).
  std::size_t answered() const { return answered_.size(); }

 private:
  std::string nonce_tag(std::string_view peer, std::string_view head) const;

  std::string secret_;
  std::string nonce_key_;  // random, this gate's own: only it can issue a nonce it accepts
  std::set<std::string> answered_;
};

}  // namespace pstrain
