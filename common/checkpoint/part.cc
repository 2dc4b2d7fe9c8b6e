// Checkpoint parts: their fields, encoding and decoding, and the identity
// (node, step) each part carries (common/checkpoint/checkpoint.h).
#include <cstring>

#include "common/checkpoint/checkpoint.h"

namespace pstrain {

namespace {

constexpr char kMagic[4] = {'P', 'S', 'C', 'K'};
constexpr std::uint32_t kFormat = 1;
enum Kind : std::uint32_t { kI64s = 1, kF32s = 2, kBytes = 3 };

template <class T>
void append_raw(std::string& out, const T& value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof(T));
}

// Reads fixed-size values from a part's bytes; a read past the end is a
// truncated part.
struct Cursor {
  const std::string& data;
  std::size_t pos;
  std::size_t end;
  const std::string& what;

  void need(std::size_t n) const {
    if (n > end - pos) throw CheckpointError(what + ": truncated (ends inside a field)");
  }
  template <class T>
  T get() {
    need(sizeof(T));
    T value;
    std::memcpy(&value, data.data() + pos, sizeof(T));
    pos += sizeof(T);
    return value;
  }
  std::string get_string(std::size_t n) {
    need(n);
    std::string s = data.substr(pos, n);
    pos += n;
    return s;
  }
};

constexpr const char* kStepField = "checkpoint.step";
constexpr const char* kNodeField = "checkpoint.node";

}  // namespace


void CheckpointPart::put_i64s(const std::string& name, std::vector<std::int64_t> values) {
  i64s_[name] = std::move(values);
}

void CheckpointPart::put_f64(const std::string& name, double value) {
  std::int64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(bits));
  put_i64(name, bits);
}

void CheckpointPart::put_f32s(const std::string& name, std::span<const float> values) {
  f32s_[name].assign(values.begin(), values.end());
}

void CheckpointPart::put_bytes(const std::string& name, const std::string& bytes) { bytes_[name] = bytes; }

bool CheckpointPart::has(const std::string& name) const {
  return i64s_.count(name) > 0 || f32s_.count(name) > 0 || bytes_.count(name) > 0;
}

namespace {
template <class Map>
const typename Map::mapped_type& field(const Map& map, const std::string& name, const std::string& what,
                                       const char* kind) {
  const auto it = map.find(name);
  if (it == map.end()) throw CheckpointError(what + ": no field '" + name + "' (" + kind + ")");
  return it->second;
}
}  // namespace

const std::vector<std::int64_t>& CheckpointPart::i64s(const std::string& name) const {
  return field(i64s_, name, what, "integers");
}

std::int64_t CheckpointPart::i64(const std::string& name) const {
  const auto& v = i64s(name);
  if (v.size() != 1) throw CheckpointError(what + ": field '" + name + "' holds " + std::to_string(v.size()) + " values, expected 1");
  return v[0];
}

double CheckpointPart::f64(const std::string& name) const {
  const std::int64_t bits = i64(name);
  double value = 0;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

const std::vector<float>& CheckpointPart::f32s(const std::string& name) const {
  return field(f32s_, name, what, "floats");
}

const std::string& CheckpointPart::bytes(const std::string& name) const { return field(bytes_, name, what, "bytes"); }

std::string CheckpointPart::encode(const PartIdentity* identity) const {
  // The identity's fields join (or replace) the part's own of those names.
  std::map<std::string, std::vector<std::int64_t>> identity_i64s;
  std::map<std::string, std::string> identity_bytes;
  if (identity != nullptr) {
    identity_i64s[kStepField] = {identity->step};
    identity_bytes[kNodeField] = identity->node;
  }
  const auto own = [&](const std::string& name) { return identity == nullptr || (name != kStepField && name != kNodeField); };
  std::size_t fields = f32s_.size() + identity_i64s.size() + identity_bytes.size();
  for (const auto& entry : i64s_) fields += own(entry.first) ? 1 : 0;
  for (const auto& entry : bytes_) fields += own(entry.first) ? 1 : 0;
  std::string out(kMagic, sizeof(kMagic));
  append_raw(out, kFormat);
  append_raw(out, static_cast<std::uint32_t>(fields));
  const auto header = [&out](const std::string& name, Kind kind, std::size_t count) {
    append_raw(out, static_cast<std::uint32_t>(name.size()));
    out += name;
    append_raw(out, static_cast<std::uint32_t>(kind));
    append_raw(out, static_cast<std::uint64_t>(count));
  };
  const auto put_i64s = [&](const std::string& name, const std::vector<std::int64_t>& v) {
    header(name, kI64s, v.size());
    out.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(std::int64_t));
  };
  for (const auto& [name, v] : i64s_) {
    if (own(name)) put_i64s(name, v);
  }
  for (const auto& [name, v] : identity_i64s) put_i64s(name, v);
  for (const auto& [name, v] : f32s_) {
    header(name, kF32s, v.size());
    out.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
  }
  const auto put_bytes = [&](const std::string& name, const std::string& v) {
    header(name, kBytes, v.size());
    out += v;
  };
  for (const auto& [name, v] : bytes_) {
    if (own(name)) put_bytes(name, v);
  }
  for (const auto& [name, v] : identity_bytes) put_bytes(name, v);
  append_raw(out, crc32_of(out));
  return out;
}

CheckpointPart CheckpointPart::decode(const std::string& data, const std::string& what) {
  if (data.size() < sizeof(kMagic) + 12) {
    throw CheckpointError(what + ": truncated (" + std::to_string(data.size()) + " bytes, shorter than a header)");
  }
  if (std::memcmp(data.data(), kMagic, sizeof(kMagic)) != 0) throw CheckpointError(what + ": not a checkpoint part (bad magic)");
  const std::size_t body = data.size() - sizeof(std::uint32_t);
  std::uint32_t stored = 0;
  std::memcpy(&stored, data.data() + body, sizeof(stored));
  if (crc32_of(data.substr(0, body)) != stored) {
    throw CheckpointError(what + ": checksum mismatch (corrupt or truncated)");
  }
  Cursor c{data, sizeof(kMagic), body, what};
  const auto format = c.get<std::uint32_t>();
  if (format != kFormat) {
    throw CheckpointError(what + ": format version " + std::to_string(format) + ", this build reads " +
                          std::to_string(kFormat));
  }
  CheckpointPart part;
  part.what = what;
  const auto fields = c.get<std::uint32_t>();
  for (std::uint32_t i = 0; i < fields; ++i) {
    const std::string name = c.get_string(c.get<std::uint32_t>());
    const auto kind = c.get<std::uint32_t>();
    const auto count = c.get<std::uint64_t>();
    if (kind == kI64s) {
      c.need(count * sizeof(std::int64_t));
      std::vector<std::int64_t> v(count);
      std::memcpy(v.data(), data.data() + c.pos, count * sizeof(std::int64_t));
      c.pos += count * sizeof(std::int64_t);
      part.i64s_[name] = std::move(v);
    } else if (kind == kF32s) {
      c.need(count * sizeof(float));
      std::vector<float> v(count);
      std::memcpy(v.data(), data.data() + c.pos, count * sizeof(float));
      c.pos += count * sizeof(float);
      part.f32s_[name] = std::move(v);
    } else if (kind == kBytes) {
      part.bytes_[name] = c.get_string(count);
    } else {
      throw CheckpointError(what + ": field '" + name + "' has unknown kind " + std::to_string(kind));
    }
  }
  if (c.pos != body) throw CheckpointError(what + ": " + std::to_string(body - c.pos) + " bytes after the last field");
  return part;
}

PartIdentity CheckpointPart::identity_of(const std::string& data, const std::string& what) {
  if (data.size() < sizeof(kMagic) + 12 || std::memcmp(data.data(), kMagic, sizeof(kMagic)) != 0) {
    throw CheckpointError(what + ": not a checkpoint part");
  }
  Cursor c{data, sizeof(kMagic), data.size() - sizeof(std::uint32_t), what};
  c.get<std::uint32_t>();  // format
  PartIdentity id;
  const auto fields = c.get<std::uint32_t>();
  for (std::uint32_t i = 0; i < fields; ++i) {
    const std::string name = c.get_string(c.get<std::uint32_t>());
    const auto kind = c.get<std::uint32_t>();
    const auto count = c.get<std::uint64_t>();
    const std::uint64_t width = kind == kI64s ? sizeof(std::int64_t) : kind == kF32s ? sizeof(float) : 1;
    if (count > (c.end - c.pos) / width) throw CheckpointError(what + ": truncated (ends inside a field)");
    if (name == kStepField && kind == kI64s && count == 1) {
      id.step = c.get<std::int64_t>();
      continue;
    }
    if (name == kNodeField && kind == kBytes) {
      id.node = c.get_string(count);
      continue;
    }
    c.pos += static_cast<std::size_t>(count * width);
  }
  return id;
}

std::uint32_t part_body_crc32(const std::string& data) {
  const std::size_t body = data.size() < sizeof(std::uint32_t) ? data.size() : data.size() - sizeof(std::uint32_t);
  return crc32_of(std::string_view(data).substr(0, body));
}

}  // namespace pstrain
