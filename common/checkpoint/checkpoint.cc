#include "common/checkpoint/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

namespace pstrain {

namespace fs = std::filesystem;

namespace {

constexpr std::int64_t kManifestFormat = 2;  // 1: part CRCs over whole files (see checkpoint.h)
constexpr const char* kManifestName = "manifest.json";

std::string sys_error() { return std::strerror(errno); }

void fsync_path(const fs::path& path, int flags) {
  const int fd = ::open(path.c_str(), flags);
  if (fd < 0) throw Error("cannot open " + path.string() + " to sync it: " + sys_error());
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) throw Error("cannot sync " + path.string() + ": " + std::strerror(err));
}

std::int64_t step_of_dir_name(const std::string& name) {
  if (name.rfind("step-", 0) != 0 || name.size() <= 5) return -1;
  std::int64_t step = 0;
  for (std::size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

// step-* directories under root, newest first.
std::vector<std::pair<std::int64_t, fs::path>> step_dirs(const fs::path& root) {
  std::vector<std::pair<std::int64_t, fs::path>> dirs;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return dirs;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const std::int64_t step = step_of_dir_name(entry.path().filename().string());
    if (step >= 0 && entry.is_directory(ec)) dirs.emplace_back(step, entry.path());
  }
  std::sort(dirs.begin(), dirs.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  return dirs;
}

// A minimal reader for the manifest's JSON (objects, arrays, strings without
// escapes beyond \" and \\, integers): the file is ours, anything else is
// reported as corrupt.
class JsonReader {
 public:
  JsonReader(const std::string& text, const std::string& what) : text_(text), what_(what) {}

  void expect(char c) {
    skip_space();
    if (pos_ >= text_.size() || text_[pos_] != c) fail(std::string("expected '") + c + "'");
    ++pos_;
  }
  bool peek(char c) {
    skip_space();
    return pos_ < text_.size() && text_[pos_] == c;
  }
  std::string string() {
    expect('"');
    std::string s;
    while (pos_ < text_.size() && text_[pos_] != '"') {
      if (text_[pos_] == '\\' && pos_ + 1 < text_.size()) ++pos_;
      s += text_[pos_++];
    }
    expect('"');
    return s;
  }
  std::int64_t integer() {
    skip_space();
    const std::size_t start = pos_;
    if (pos_ < text_.size() && text_[pos_] == '-') ++pos_;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') ++pos_;
    if (pos_ == start) fail("expected an integer");
    return std::stoll(text_.substr(start, pos_ - start));
  }
  // Calls f(key) for each member of an object.
  template <class F>
  void object(F&& f) {
    expect('{');
    if (peek('}')) return expect('}');
    do {
      const std::string key = string();
      expect(':');
      f(key);
    } while (peek(',') && (expect(','), true));
    expect('}');
  }
  template <class F>
  void array(F&& f) {
    expect('[');
    if (peek(']')) return expect(']');
    do {
      f();
    } while (peek(',') && (expect(','), true));
    expect(']');
  }
  [[noreturn]] void fail(const std::string& why) const {
    throw CheckpointError(what_ + ": not a valid manifest (" + why + " at byte " + std::to_string(pos_) + ")");
  }

 private:
  void skip_space() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  const std::string& text_;
  const std::string& what_;
  std::size_t pos_ = 0;
};

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

}  // namespace

// ---- fingerprint ----

CheckpointFingerprint checkpoint_fingerprint(const RunConfig& config, std::int64_t num_params) {
  CheckpointFingerprint f;
  const bool ps = config.mode != Mode::kAllreduce;
  f.fields = {{"mode", std::string(to_string(config.mode))},
              {"workload.model", config.workload.model},
              {"cluster.workers", std::to_string(config.cluster.num_workers)},
              {"cluster.servers", std::to_string(ps ? config.cluster.num_servers : 0)},
              {"ps.partition_bytes", std::to_string(ps ? config.ps.partition_bytes : 0)},
              {"optimizer.name", config.optimizer.name}};
  if (num_params >= 0) f.fields.emplace_back("parameters", std::to_string(num_params));
  return f;
}

std::string fingerprint_mismatch(const CheckpointFingerprint& saved, const CheckpointFingerprint& config) {
  std::string out;
  for (const auto& [key, value] : config.fields) {
    // (key named by the capture: clang before 16 cannot capture a structured binding; tools/fuzz.sh builds this)
    const auto it = std::find_if(saved.fields.begin(), saved.fields.end(), [&name = key](const auto& f) { return f.first == name; });
    if (it == saved.fields.end()) {
      if (key != "parameters") out += (out.empty() ? "" : "; ") + key + ": not in the checkpoint";
      continue;
    }
    if (it->second != value) {
      out += (out.empty() ? "" : "; ") + key + ": the checkpoint has " + json_string(it->second) + ", the config " +
             json_string(value);
    }
  }
  return out;
}

// ---- files ----

std::uint32_t crc32_of(std::string_view data) {
  uLong crc = crc32(0L, Z_NULL, 0);
  std::size_t done = 0;
  while (done < data.size()) {  // zlib takes uInt lengths
    const auto n = static_cast<uInt>(std::min<std::size_t>(data.size() - done, 1u << 30));
    crc = crc32(crc, reinterpret_cast<const Bytef*>(data.data() + done), n);
    done += n;
  }
  return static_cast<std::uint32_t>(crc);
}

std::string checkpoint_dir_name(std::int64_t step) {
  char name[32];
  std::snprintf(name, sizeof(name), "step-%08lld", static_cast<long long>(step));
  return name;
}

fs::path checkpoint_root(const RunConfig& config) {
  if (!config.checkpoint.dir.empty()) return fs::path(config.checkpoint.dir);
  return fs::path(config.output.run_dir) / "checkpoints";
}

void write_file_atomic(const fs::path& path, const std::string& data) {
  const fs::path tmp = path.string() + ".tmp-" + std::to_string(getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error("cannot create " + tmp.string() + ": " + sys_error());
  std::size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = n < 0 ? sys_error() : "no progress";
      ::close(fd);
      ::unlink(tmp.c_str());
      throw Error("cannot write " + tmp.string() + ": " + why);
    }
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    const std::string why = sys_error();
    ::unlink(tmp.c_str());
    throw Error("cannot sync " + tmp.string() + ": " + why);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = sys_error();
    ::unlink(tmp.c_str());
    throw Error("cannot rename " + tmp.string() + " to " + path.string() + ": " + why);
  }
  fsync_path(path.parent_path().empty() ? fs::path(".") : path.parent_path(), O_RDONLY | O_DIRECTORY);
}

std::string read_file_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw CheckpointError(path.filename().string() + ": missing or unreadable");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_checkpoint_part(const fs::path& dir, const std::string& name, const CheckpointPart& part) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw Error("cannot create the checkpoint directory " + dir.string() + ": " + ec.message());
  const PartIdentity identity{name, step_of_dir_name(dir.filename().string())};
  write_file_atomic(dir / name, part.encode(&identity));
}

namespace {

// Why part `p` (its bytes `data`) of the checkpoint in `dir` described by `m`
// cannot be used, or "".
std::string part_problem(const fs::path& dir, const CheckpointManifest& m, const CheckpointPartInfo& p,
                         const std::string& data) {
  if (static_cast<std::int64_t>(data.size()) != p.bytes) {
    return "part " + p.name + " is " + std::to_string(data.size()) + " bytes, the manifest says " +
           std::to_string(p.bytes) + " (truncated or rewritten)";
  }
  const std::uint32_t crc = m.format >= 2 ? part_body_crc32(data) : crc32_of(data);
  if (crc != p.crc32) {
    return "part " + p.name + " fails its CRC-32 check (corrupt, or not the part the manifest was written over)";
  }
  const std::string what = dir.filename().string() + "/" + p.name;
  const PartIdentity id = CheckpointPart::identity_of(data, what);
  if (!id.node.empty() && id.node != p.name) return "part " + p.name + " is " + id.node + "'s part, not " + p.name;
  const std::int64_t dir_step = step_of_dir_name(dir.filename().string());
  if (id.step >= 0 && dir_step >= 0 && id.step != dir_step) {
    return "part " + p.name + " belongs to step " + std::to_string(id.step) + ", not to " + dir.filename().string();
  }
  return "";
}

}  // namespace

CheckpointPart read_checkpoint_part(const fs::path& dir, const std::string& name) {
  const std::string what = dir.filename().string() + "/" + name;
  const CheckpointManifest m = read_checkpoint_manifest(dir);
  const auto it = std::find_if(m.parts.begin(), m.parts.end(), [&](const auto& p) { return p.name == name; });
  if (it == m.parts.end()) throw CheckpointError(what + ": not listed in the manifest");
  const std::string data = read_file_bytes(dir / name);
  const std::string problem = part_problem(dir, m, *it, data);
  if (!problem.empty()) throw CheckpointError(dir.filename().string() + ": " + problem);
  return CheckpointPart::decode(data, what);
}

std::string manifest_json(const CheckpointManifest& m) {
  std::string s = "{\"format\":" + std::to_string(m.format) + ",\"step\":" + std::to_string(m.step) + ",\"fingerprint\":{";
  for (std::size_t i = 0; i < m.fingerprint.fields.size(); ++i) {
    if (i > 0) s += ',';
    s += json_string(m.fingerprint.fields[i].first);
    s += ':';
    s += json_string(m.fingerprint.fields[i].second);
  }
  s += "}";
  if (!m.members.empty()) {
    s += ",\"members\":[";
    for (std::size_t i = 0; i < m.members.size(); ++i) s += (i ? "," : "") + std::to_string(m.members[i]);
    s += "],\"slots\":" + std::to_string(m.slots);
  }
  s += ",\"parts\":[";
  for (std::size_t i = 0; i < m.parts.size(); ++i) {
    s += std::string(i ? "," : "") + "\n  {\"name\":" + json_string(m.parts[i].name) +
         ",\"bytes\":" + std::to_string(m.parts[i].bytes) + ",\"crc32\":" + std::to_string(m.parts[i].crc32) + "}";
  }
  return s + "\n]}\n";
}

CheckpointManifest parse_manifest_json(const std::string& text, const std::string& what) {
  JsonReader r(text, what);
  CheckpointManifest m;
  bool have_step = false;
  std::int64_t format = -1;
  r.object([&](const std::string& key) {
    if (key == "format") {
      format = r.integer();
    } else if (key == "step") {
      m.step = r.integer();
      have_step = true;
    } else if (key == "fingerprint") {
      r.object([&](const std::string& k) { m.fingerprint.fields.emplace_back(k, r.string()); });
    } else if (key == "members") {
      r.array([&] {
        const std::int64_t rank = r.integer();
        if (rank < 0 || rank > 1'000'000) r.fail("a member rank out of range: " + std::to_string(rank));
        m.members.push_back(static_cast<int>(rank));
      });
    } else if (key == "slots") {
      m.slots = r.integer();
    } else if (key == "parts") {
      r.array([&] {
        CheckpointPartInfo p;
        r.object([&](const std::string& k) {
          if (k == "name") {
            p.name = r.string();
          } else if (k == "bytes") {
            p.bytes = r.integer();
          } else if (k == "crc32") {
            p.crc32 = static_cast<std::uint32_t>(r.integer());
          } else {
            r.fail("unknown part key '" + k + "'");
          }
        });
        if (p.name.empty() || p.name.find('/') != std::string::npos) r.fail("a part without a plain file name");
        m.parts.push_back(p);
      });
    } else {
      r.fail("unknown key '" + key + "'");
    }
  });
  if (format != 1 && format != kManifestFormat) {
    throw CheckpointError(what + ": manifest format " + std::to_string(format) + ", this build reads 1 and " +
                          std::to_string(kManifestFormat));
  }
  m.format = format;
  if (!have_step) throw CheckpointError(what + ": manifest has no step");
  return m;
}

CheckpointManifest read_checkpoint_manifest(const fs::path& dir) {
  const fs::path path = dir / kManifestName;
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    throw CheckpointError(dir.filename().string() + ": no manifest.json (the checkpoint was not completed)");
  }
  return parse_manifest_json(read_file_bytes(path), dir.filename().string() + "/manifest.json");
}

CheckpointManifest write_checkpoint_manifest(const fs::path& dir, std::int64_t step,
                                             const CheckpointFingerprint& fingerprint,
                                             const std::vector<std::string>& part_names,
                                             const std::vector<int>& members, std::int64_t slots) {
  CheckpointManifest m;
  m.step = step;
  m.fingerprint = fingerprint;
  m.members = members;
  m.slots = members.empty() ? 0 : slots;
  for (const std::string& name : part_names) {
    const std::string data = read_file_bytes(dir / name);
    CheckpointPart::decode(data, dir.filename().string() + "/" + name);  // its own checksum
    m.parts.push_back({name, static_cast<std::int64_t>(data.size()), part_body_crc32(data)});
  }
  write_file_atomic(dir / kManifestName, manifest_json(m));
  return m;
}

std::string checkpoint_problem(const fs::path& dir) {
  try {
    const CheckpointManifest m = read_checkpoint_manifest(dir);
    if (m.parts.empty()) return "the manifest lists no parts";
    const std::int64_t dir_step = step_of_dir_name(dir.filename().string());
    if (dir_step >= 0 && m.step != dir_step) {
      return "the manifest is step " + std::to_string(m.step) + "'s, not " + dir.filename().string() + "'s";
    }
    for (const CheckpointPartInfo& p : m.parts) {
      std::error_code ec;
      const auto size = fs::file_size(dir / p.name, ec);
      if (ec) return "part " + p.name + " is missing";
      if (static_cast<std::int64_t>(size) != p.bytes) {
        return "part " + p.name + " is " + std::to_string(size) + " bytes, the manifest says " +
               std::to_string(p.bytes) + " (truncated)";
      }
      const std::string problem = part_problem(dir, m, p, read_file_bytes(dir / p.name));
      if (!problem.empty()) return problem;
    }
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

std::optional<FoundCheckpoint> find_newest_checkpoint(const fs::path& root, std::vector<std::string>* skipped) {
  for (const auto& [step, dir] : step_dirs(root)) {
    const std::string problem = checkpoint_problem(dir);
    if (problem.empty()) return FoundCheckpoint{dir, read_checkpoint_manifest(dir)};
    if (skipped) skipped->push_back(dir.filename().string() + ": " + problem);
  }
  return std::nullopt;
}

std::vector<fs::path> prune_checkpoints(const fs::path& root, int keep) {
  std::vector<fs::path> removed;
  int complete = 0;
  bool seen_complete = false;
  for (const auto& [step, dir] : step_dirs(root)) {
    std::error_code ec;
    const bool is_complete = fs::exists(dir / kManifestName, ec);
    if (is_complete && complete < keep) {
      ++complete;
      seen_complete = true;
      continue;
    }
    if (!seen_complete) continue;  // newer than every complete one: may be being written
    fs::remove_all(dir, ec);
    if (!ec) removed.push_back(dir);
  }
  return removed;
}

std::vector<fs::path> remove_checkpoints_after(const fs::path& root, std::int64_t step) {
  std::vector<fs::path> removed;
  for (const auto& [s, dir] : step_dirs(root)) {
    if (s <= step) continue;
    std::error_code ec;
    fs::remove_all(dir, ec);
    if (ec) throw Error("cannot remove " + dir.string() + ": " + ec.message());
    removed.push_back(dir);
  }
  return removed;
}

FoundCheckpoint resolve_resume(const fs::path& path, const RunConfig& config, std::vector<std::string>* skipped) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) throw CheckpointError("--resume " + path.string() + ": no such directory");
  if (fs::exists(path / kManifestName, ec) || step_of_dir_name(path.filename().string()) >= 0) {
    const std::string problem = checkpoint_problem(path);
    if (!problem.empty()) throw CheckpointError("--resume " + path.string() + ": " + problem);
    return FoundCheckpoint{path, read_checkpoint_manifest(path)};
  }
  std::vector<fs::path> roots;
  if (!step_dirs(path).empty()) roots.push_back(path);
  roots.push_back(path / "checkpoints");
  if (!config.checkpoint.dir.empty()) roots.push_back(checkpoint_root(config));
  std::string looked;
  for (const fs::path& root : roots) {
    if (step_dirs(root).empty()) continue;
    if (auto found = find_newest_checkpoint(root, skipped)) return *found;
    looked += (looked.empty() ? "" : ", ") + root.string();
  }
  throw CheckpointError("--resume " + path.string() + ": no complete checkpoint" +
                        (looked.empty() ? " (no step-* directory found)" : " in " + looked));
}

}  // namespace pstrain
