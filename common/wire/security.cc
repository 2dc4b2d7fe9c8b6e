#include "common/wire/security.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include <zmq.h>

#include "common/base/errors.h"
#include "common/wire/job_secret.h"

namespace pstrain {
namespace {

namespace fs = std::filesystem;

constexpr std::size_t kZ85KeyChars = 40;
constexpr std::size_t kBinaryKeyBytes = 32;

void write_private_file(const fs::path& path, const std::string& text, bool force) {
  const int flags = O_WRONLY | O_CREAT | O_TRUNC | (force ? 0 : O_EXCL);
  const int fd = ::open(path.c_str(), flags, 0600);
  if (fd < 0) {
    if (errno == EEXIST) {
      throw Error("key file " + path.string() + " already exists (pass --force to replace the job's keys)");
    }
    throw Error("cannot write key file " + path.string() + ": " + std::strerror(errno));
  }
  ::fchmod(fd, 0600);  // O_TRUNC on an existing file kept its old mode
  const char* p = text.data();
  std::size_t left = text.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      throw Error("cannot write key file " + path.string() + ": " + std::strerror(err));
    }
    p += n;
    left -= static_cast<std::size_t>(n);
  }
  if (::close(fd) != 0) throw Error("cannot write key file " + path.string() + ": " + std::strerror(errno));
}

std::string key_file_text(const std::string& what, const CurveKeyPair& keys, bool with_secret) {
  std::string text = "# pstrain CURVE key: " + what + "\n";
  if (with_secret) text += "# secret: keep this file private (mode 0600)\n";
  text += "public = " + keys.public_z85 + "\n";
  if (with_secret) text += "secret = " + keys.secret_z85 + "\n";
  return text;
}

}  // namespace

// The 32 bytes a Z85 key stands for; empty when the text is not a Z85 key.
std::string curve_key_bytes(const std::string& z85) {
  if (z85.size() != kZ85KeyChars) return {};
  std::array<std::uint8_t, kBinaryKeyBytes> out{};
  if (zmq_z85_decode(out.data(), z85.c_str()) == nullptr) return {};
  return std::string(reinterpret_cast<const char*>(out.data()), out.size());
}

CurveKeyPair generate_curve_keypair() {
  std::array<char, kZ85KeyChars + 1> pub{};
  std::array<char, kZ85KeyChars + 1> sec{};
  if (zmq_curve_keypair(pub.data(), sec.data()) != 0) {
    throw Error(std::string("cannot make a CURVE keypair (is libzmq built with libsodium?): ") +
                zmq_strerror(zmq_errno()));
  }
  return CurveKeyPair{std::string(pub.data(), kZ85KeyChars), std::string(sec.data(), kZ85KeyChars)};
}

std::string worker_key_name(int rank) { return "worker-" + std::to_string(rank); }

std::optional<KeyOwner> key_owner(std::string_view user_id) {
  if (user_id == "server") return KeyOwner{Role::kServer, -1};
  if (user_id == "worker") return KeyOwner{Role::kWorker, -1};
  constexpr std::string_view prefix = "worker-";
  if (user_id.size() <= prefix.size() || user_id.size() > prefix.size() + 9 || user_id.substr(0, prefix.size()) != prefix) {
    return std::nullopt;
  }
  int rank = 0;
  for (const char c : user_id.substr(prefix.size())) {
    if (c < '0' || c > '9') return std::nullopt;
    rank = rank * 10 + (c - '0');
  }
  return KeyOwner{Role::kWorker, rank};
}

void write_job_keys(const fs::path& dir, bool force, int num_workers) {
  if (num_workers < 0) throw Error("pstrain-keygen: --workers must be at least 1, got " + std::to_string(num_workers));
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw Error("cannot create key dir " + dir.string() + ": " + ec.message());
  std::vector<std::pair<std::string, std::string>> pairs = {
      {"bind", "the binding nodes' keypair (scheduler and servers)"},
      {"server", "the servers' client keypair (servers -> scheduler)"}};
  if (num_workers == 0) {
    pairs.emplace_back("worker", "the workers' client keypair (workers -> scheduler and servers)");
  }
  for (int r = 0; r < num_workers; ++r) {
    pairs.emplace_back(worker_key_name(r), "worker " + std::to_string(r) + "'s own client keypair");
  }
  if (!force) {  // all or nothing: check every name before writing any
    for (const auto& [stem, what] : pairs) {
      for (const char* ext : {".key", ".pub"}) {
        if (fs::exists(dir / (stem + ext), ec)) {
          throw Error("key file " + (dir / (stem + ext)).string() +
                      " already exists (pass --force to replace the job's keys)");
        }
      }
    }
  }
  for (const auto& [stem, what] : pairs) {
    const CurveKeyPair keys = generate_curve_keypair();
    write_private_file(dir / (stem + ".key"), key_file_text(what, keys, true), force);
    write_private_file(dir / (stem + ".pub"), key_file_text(what, keys, false), force);
  }
  if (num_workers > 0 && force) {  // a shared key left from an earlier layout would still be admitted
    for (const char* old : {"worker.key", "worker.pub"}) fs::remove(dir / old, ec);
  }
}

CurveKeyPair read_key_file(const fs::path& path, bool need_secret) {
  std::ifstream in(path);
  if (!in) {
    std::error_code ec;
    const bool exists = fs::exists(path, ec);
    throw ConfigError("security: key file " + path.string() +
                      (exists ? " cannot be read: " + std::string(std::strerror(errno))
                              : " does not exist (write the job's keys with pstrain-keygen DIR)"));
  }
  CurveKeyPair keys;
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty() || line[0] == '#') continue;
    const auto eq = line.find(" = ");
    const std::string name = eq == std::string::npos ? "" : line.substr(0, eq);
    const std::string value = eq == std::string::npos ? "" : line.substr(eq + 3);
    if ((name != "public" && name != "secret") || curve_key_bytes(value).empty()) {
      throw ConfigError("security: key file " + path.string() + ":" + std::to_string(line_no) +
                        ": expected 'public = <40 Z85 characters>' or 'secret = <...>'");
    }
    (name == "public" ? keys.public_z85 : keys.secret_z85) = value;
  }
  if (keys.public_z85.empty()) throw ConfigError("security: key file " + path.string() + " has no public key");
  if (need_secret && keys.secret_z85.empty()) {
    throw ConfigError("security: key file " + path.string() + " has no secret key");
  }
  return keys;
}

namespace {

// The worker keys a binding node admits: worker-R.pub for R = 0, 1, ...
// while present, and the shared worker.pub if present (one of the two).
std::vector<AllowedClient> allowed_workers(const fs::path& dir) {
  std::vector<AllowedClient> allowed;
  std::error_code ec;
  for (int r = 0; fs::exists(dir / (worker_key_name(r) + ".pub"), ec); ++r) {
    allowed.push_back({worker_key_name(r), read_key_file(dir / (worker_key_name(r) + ".pub"), false).public_z85});
  }
  if (allowed.empty() || fs::exists(dir / "worker.pub", ec)) {
    allowed.push_back({"worker", read_key_file(dir / "worker.pub", false).public_z85});
  }
  return allowed;
}

}  // namespace

SecurityContext SecurityContext::load(const SecurityConfig& config, Role role, int rank) {
  SecurityContext s;
  if (config.mode != "curve") {
    const char* env = std::getenv(kSecretFileEnv);
    const std::string file = !config.secret_file.empty() ? config.secret_file : env != nullptr ? env : "";
    if (file.empty()) {
      throw ConfigError(std::string("key 'security.secret_file': empty with security.mode = \"off\" and $") +
                        kSecretFileEnv + " not set: every node needs the job's secret to register (launch makes "
                        "one; by hand: pstrain-keygen --secret FILE, then security.secret_file = FILE on every node)");
    }
    s.job_secret = read_secret_file(file);
    return s;
  }
  if (config.key_dir.empty()) {
    throw ConfigError(
        "key 'security.key_dir': empty with security.mode = \"curve\" (pstrain-launch fills it in; "
        "elsewhere write the keys with pstrain-keygen DIR and set security.key_dir = DIR)");
  }
  const fs::path dir(config.key_dir);
  s.curve = true;
  const auto pub = [&dir](const char* name) { return read_key_file(dir / name, false).public_z85; };
  switch (role) {
    case Role::kScheduler:
      s.bind = read_key_file(dir / "bind.key", true);
      s.allowed = allowed_workers(dir);
      s.allowed.insert(s.allowed.begin(), {"server", pub("server.pub")});
      break;
    case Role::kServer:
      s.bind = read_key_file(dir / "bind.key", true);
      s.allowed = allowed_workers(dir);
      s.server_public_z85 = pub("bind.pub");
      s.client = read_key_file(dir / "server.key", true);
      break;
    case Role::kWorker: {
      s.server_public_z85 = pub("bind.pub");
      std::error_code ec;
      const bool own = rank >= 0 && fs::exists(dir / (worker_key_name(rank) + ".key"), ec);
      if (!own && rank < 0 && !fs::exists(dir / "worker.key", ec) && fs::exists(dir / (worker_key_name(0) + ".key"), ec)) {
        throw ConfigError("security: key dir " + dir.string() +
                          " has one key per worker (worker-R.key): the worker needs its rank (--rank)");
      }
      s.client = read_key_file(dir / (own ? worker_key_name(rank) + ".key" : std::string("worker.key")), true);
      break;
    }
  }
  return s;
}

}  // namespace pstrain
