#include "common/wire/job_secret.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <initializer_list>

#include <sodium.h>

#include "common/base/errors.h"

namespace pstrain {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kAnswerTag = "pstrain register v1";
constexpr std::string_view kNonceTag = "pstrain nonce v1";
constexpr std::size_t kNonceRandomBytes = 16;
constexpr std::size_t kNonceTimeBytes = 8;
constexpr std::size_t kMacBytes = crypto_auth_hmacsha256_BYTES;  // 32
constexpr std::size_t kNonceBytes = kNonceRandomBytes + kNonceTimeBytes + kMacBytes;

void init_sodium() {
  if (sodium_init() < 0) throw Error("cannot initialise libsodium (needed for the job secret)");
}

// HMAC-SHA256 keyed with `key` over the concatenation of `parts`.
std::string hmac(std::string_view key, std::initializer_list<std::string_view> parts) {
  init_sodium();
  crypto_auth_hmacsha256_state state;
  crypto_auth_hmacsha256_init(&state, reinterpret_cast<const unsigned char*>(key.data()), key.size());
  for (const std::string_view part : parts) {
    crypto_auth_hmacsha256_update(&state, reinterpret_cast<const unsigned char*>(part.data()), part.size());
  }
  std::array<unsigned char, kMacBytes> out{};
  crypto_auth_hmacsha256_final(&state, out.data());
  sodium_memzero(&state, sizeof state);
  return std::string(reinterpret_cast<const char*>(out.data()), out.size());
}

bool same_bytes(std::string_view a, std::string_view b) {
  return a.size() == b.size() && sodium_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string random_bytes(std::size_t n) {
  init_sodium();
  std::string out(n, '\0');
  randombytes_buf(out.data(), out.size());
  return out;
}

std::string encode_time(std::int64_t ms) {
  std::string out(kNonceTimeBytes, '\0');
  for (std::size_t i = 0; i < kNonceTimeBytes; ++i) {
    out[i] = static_cast<char>((static_cast<std::uint64_t>(ms) >> (8 * (kNonceTimeBytes - 1 - i))) & 0xffu);
  }
  return out;
}

std::int64_t decode_time(std::string_view bytes) {
  std::uint64_t v = 0;
  for (const char c : bytes) v = (v << 8) | static_cast<unsigned char>(c);
  return static_cast<std::int64_t>(v);
}

std::string to_hex(const std::string& bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (const char c : bytes) {
    out += kHex[(static_cast<unsigned char>(c) >> 4) & 15u];
    out += kHex[static_cast<unsigned char>(c) & 15u];
  }
  return out;
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

void check_secret(std::string_view secret) {
  if (secret.size() != kJobSecretBytes) {
    throw Error("job secret: expected " + std::to_string(kJobSecretBytes) + " bytes, got " +
                std::to_string(secret.size()));
  }
}

}  // namespace

std::string generate_job_secret() { return random_bytes(kJobSecretBytes); }

void write_secret_file(const fs::path& path, const std::string& secret) {
  check_secret(secret);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) throw Error("cannot write secret file " + path.string() + ": " + std::strerror(errno));
  ::fchmod(fd, 0600);  // O_TRUNC on an existing file kept its old mode
  const std::string text = to_hex(secret) + "\n";
  const ssize_t n = ::write(fd, text.data(), text.size());
  const int err = errno;
  if (::close(fd) != 0 || n != static_cast<ssize_t>(text.size())) {
    throw Error("cannot write secret file " + path.string() + ": " + std::strerror(n < 0 ? err : EIO));
  }
}

std::string read_secret_file(const fs::path& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    throw ConfigError("security: secret file " + path.string() + ": " + std::strerror(errno) +
                      " (launch writes RUN_DIR/secret; by hand: pstrain-keygen --secret FILE)");
  }
  if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    throw ConfigError("security: secret file " + path.string() + " is open to other users (mode " + mode +
                      "): chmod 600 " + path.string());
  }
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) {
    throw ConfigError("security: secret file " + path.string() + " cannot be read: " + std::strerror(errno));
  }
  std::string secret;
  for (std::size_t i = 0; i + 1 < line.size() && hex_digit(line[i]) >= 0 && hex_digit(line[i + 1]) >= 0; i += 2) {
    secret += static_cast<char>(hex_digit(line[i]) * 16 + hex_digit(line[i + 1]));
  }
  if (secret.size() != kJobSecretBytes || line.size() != 2 * kJobSecretBytes) {
    throw ConfigError("security: secret file " + path.string() + ": expected one line of " +
                      std::to_string(2 * kJobSecretBytes) + " hex digits (pstrain-keygen --secret FILE writes one)");
  }
  return secret;
}

std::string answer_challenge(std::string_view secret, std::string_view nonce, std::string_view request_bytes) {
  check_secret(secret);
  return hmac(secret, {kAnswerTag, nonce, request_bytes});
}

RegistrationGate::RegistrationGate(std::string secret)
    : secret_(std::move(secret)), nonce_key_(random_bytes(kMacBytes)) {
  check_secret(secret_);
}

std::string RegistrationGate::nonce_tag(std::string_view peer, std::string_view head) const {
  const std::string peer_size = encode_time(static_cast<std::int64_t>(peer.size()));  // peer ids cannot run into head
  return hmac(nonce_key_, {kNonceTag, peer_size, peer, head});
}

std::string RegistrationGate::challenge(std::string_view peer, std::int64_t now_ms) const {
  const std::string head = random_bytes(kNonceRandomBytes) + encode_time(now_ms);
  return head + nonce_tag(peer, head);
}

void RegistrationGate::check(std::string_view peer, std::string_view nonce, std::string_view proof,
                             std::string_view request_bytes, std::int64_t now_ms, std::int64_t max_age_ms) {
  if (nonce.empty() || proof.empty()) {
    throw ProtocolError("no answer to the job's challenge: the node has no job secret (every node needs the same "
                        "security.secret_file or $" + std::string(kSecretFileEnv) + ")");
  }
  const std::string_view head = nonce.substr(0, kNonceRandomBytes + kNonceTimeBytes);
  if (nonce.size() != kNonceBytes || !same_bytes(nonce.substr(head.size()), nonce_tag(peer, head))) {
    throw ProtocolError("its challenge was not one this scheduler gave this connection");
  }
  const std::int64_t age_ms = now_ms - decode_time(head.substr(kNonceRandomBytes));
  if (age_ms < 0 || age_ms > max_age_ms) {
    throw ProtocolError("its answer came " + std::to_string(age_ms) + " ms after the challenge (at most " +
                        std::to_string(max_age_ms) + ", cluster.timeout_ms)");
  }
  if (!same_bytes(proof, answer_challenge(secret_, nonce, request_bytes))) {
    throw ProtocolError("wrong answer to the job's challenge: the node does not hold this job's secret "
                        "(security.secret_file)");
  }
  if (!answered_.insert(std::string(nonce)).second) {
    throw ProtocolError("its challenge was answered before: a replayed registration");
  }
}

}  // namespace pstrain
