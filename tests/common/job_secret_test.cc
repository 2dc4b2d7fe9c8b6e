// The job secret and the registration challenge (common/wire/job_secret.h):
// the file (mode, format), and the gate's answers: right, wrong, replayed,
// missing, for another connection, from another gate, too late.
#include <doctest/doctest.h>

#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "common/base/errors.h"
#include "common/config/config.h"
#include "common/wire/job_secret.h"
#include "common/wire/security.h"
#include "tests/support/temp_dir.h"
#include "tests/support/throw_text.h"

using namespace pstrain;
using pstrain::test::thrown_text;

namespace {

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

constexpr std::int64_t kMaxAgeMs = 30000;

// What RegistrationGate::check says, "" when it admits.
std::string refusal(RegistrationGate& gate, const std::string& peer, const std::string& nonce, const std::string& proof,
                    const std::string& request, std::int64_t now_ms = 1000) {
  return thrown_text<ProtocolError>([&] { gate.check(peer, nonce, proof, request, now_ms, kMaxAgeMs); });
}

}  // namespace

TEST_CASE("job secret: 32 random bytes, written as 64 hex digits with mode 0600 and read back") {
  test::TempDir dir("secret");
  const std::string secret = generate_job_secret();
  CHECK(secret.size() == kJobSecretBytes);
  CHECK(generate_job_secret() != secret);
  const auto file = dir.path() / "secret";
  write_secret_file(file, secret);
  struct stat st {};
  REQUIRE(::stat(file.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  CHECK(read_secret_file(file) == secret);
  std::string text;
  std::getline(std::ifstream(file), text);
  CHECK(text.size() == 64);
  CHECK_FALSE(has(text, secret));  // as hex, not raw bytes
}

TEST_CASE("job secret: a file open to other users, malformed or missing is a config error naming it and the fix") {
  test::TempDir dir("secret");
  const auto file = dir.path() / "secret";
  CHECK(has(thrown_text<ConfigError>([&] { read_secret_file(file); }), file.string()));
  write_secret_file(file, generate_job_secret());
  REQUIRE(::chmod(file.c_str(), 0644) == 0);
  const std::string open = thrown_text<ConfigError>([&] { read_secret_file(file); });
  CHECK(has(open, "open to other users (mode 0644)"));
  CHECK(has(open, "chmod 600 " + file.string()));
  std::ofstream(file) << "not hex\n";
  REQUIRE(::chmod(file.c_str(), 0600) == 0);
  CHECK(has(thrown_text<ConfigError>([&] { read_secret_file(file); }), "expected one line of 64 hex digits"));
  std::ofstream(file) << std::string(62, 'a') << "\n";  // too short
  CHECK(has(thrown_text<ConfigError>([&] { read_secret_file(file); }), "expected one line of 64 hex digits"));
}

TEST_CASE("security off: every node loads the job secret, from security.secret_file or $PSTRAIN_SECRET_FILE") {
  test::TempDir dir("secret");
  const auto file = dir.path() / "secret";
  const std::string secret = generate_job_secret();
  write_secret_file(file, secret);
  ::unsetenv(kSecretFileEnv);
  const std::string missing = thrown_text<ConfigError>([] { SecurityContext::load(SecurityConfig{}, Role::kWorker, 0); });
  CHECK(has(missing, "key 'security.secret_file'"));
  CHECK(has(missing, "pstrain-keygen --secret FILE"));
  SecurityConfig off;
  off.secret_file = file.string();
  CHECK(SecurityContext::load(off, Role::kScheduler).job_secret == secret);
  ::setenv(kSecretFileEnv, file.c_str(), 1);
  CHECK(SecurityContext::load(SecurityConfig{}, Role::kServer).job_secret == secret);
  ::unsetenv(kSecretFileEnv);
}

TEST_CASE("registration gate: the right answer is admitted once; wrong, replayed, missing or misplaced ones are refused") {
  const std::string secret = generate_job_secret();
  RegistrationGate gate(secret);
  const std::string request = "the register request's bytes";
  const std::string nonce = gate.challenge("peer-a", 1000);
  const std::string proof = answer_challenge(secret, nonce, request);

  SUBCASE("right, then replayed") {
    CHECK(refusal(gate, "peer-a", nonce, proof, request) == "");
    CHECK(gate.answered() == 1);
    CHECK(has(refusal(gate, "peer-a", nonce, proof, request), "answered before: a replayed registration"));
  }
  SUBCASE("wrong: another secret, or the answer for another request") {
    const std::string other = answer_challenge(generate_job_secret(), nonce, request);
    CHECK(has(refusal(gate, "peer-a", nonce, other, request), "wrong answer to the job's challenge"));
    CHECK(has(refusal(gate, "peer-a", nonce, proof, request + " changed"), "wrong answer"));
    CHECK(refusal(gate, "peer-a", nonce, proof, request) == "");  // the nonce was not used up by wrong answers
  }
  SUBCASE("missing: a node without the secret sends no answer") {
    CHECK(has(refusal(gate, "peer-a", "", "", request), "no answer to the job's challenge"));
    CHECK(has(refusal(gate, "peer-a", nonce, "", request), "no answer"));
  }
  SUBCASE("misplaced: another connection's nonce, another gate's, a forged one, one too old") {
    CHECK(has(refusal(gate, "peer-b", nonce, proof, request), "not one this scheduler gave this connection"));
    RegistrationGate other(secret);
    const std::string foreign = other.challenge("peer-a", 1000);
    CHECK(has(refusal(gate, "peer-a", foreign, answer_challenge(secret, foreign, request), request), "not one this"));
    std::string forged = nonce;
    forged[0] = static_cast<char>(forged[0] ^ 1);
    CHECK(has(refusal(gate, "peer-a", forged, answer_challenge(secret, forged, request), request), "not one this"));
    CHECK(has(refusal(gate, "peer-a", nonce, proof, request, 1000 + kMaxAgeMs + 1), "ms after the challenge"));
    CHECK(has(refusal(gate, "peer-a", nonce, proof, request, 999), "ms after the challenge"));
  }
}

TEST_CASE("registration gate: no gate or answer without a 32-byte secret") {
  CHECK(has(thrown_text<Error>([] { RegistrationGate gate(""); }), "expected 32 bytes"));
  CHECK(has(thrown_text<Error>([] { answer_challenge("short", "nonce", "request"); }), "expected 32 bytes"));
}
