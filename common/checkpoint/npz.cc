#include "common/checkpoint/npz.h"

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <vector>

#include <zlib.h>

#include "common/base/errors.h"

namespace pstrain {
namespace {

void put_u16(std::string& out, std::uint32_t v) {
  out.push_back(static_cast<char>(v & 0xff));
  out.push_back(static_cast<char>((v >> 8) & 0xff));
}
void put_u32(std::string& out, std::uint32_t v) {
  put_u16(out, v & 0xffff);
  put_u16(out, v >> 16);
}

// The fields a local header and a central directory entry share.
struct Member {
  std::string name;
  std::uint32_t crc = 0;
  std::uint32_t size = 0;
  std::uint32_t offset = 0;  // of its local header
};

// MS-DOS date and time of 1980-01-01 00:00: the archive does not depend on
// when it was written, so equal weights give equal files.
constexpr std::uint32_t kDosTime = 0;
constexpr std::uint32_t kDosDate = (0u << 9) | (1u << 5) | 1u;

void put_common(std::string& out, const Member& m) {
  put_u16(out, 20);  // version needed to extract: 2.0
  put_u16(out, 0);   // flags
  put_u16(out, 0);   // method: stored
  put_u16(out, kDosTime);
  put_u16(out, kDosDate);
  put_u32(out, m.crc);
  put_u32(out, m.size);  // compressed size
  put_u32(out, m.size);  // uncompressed size
  put_u16(out, static_cast<std::uint32_t>(m.name.size()));
  put_u16(out, 0);  // extra field length
}

std::uint32_t checked_u32(std::uint64_t value, const std::string& path) {
  if (value > std::numeric_limits<std::uint32_t>::max()) {
    throw Error("cannot write " + path + ": the archive passes 4 GiB, which needs zip64 (not supported)");
  }
  return static_cast<std::uint32_t>(value);
}

}  // namespace

std::string npy_bytes(std::span<const std::int64_t> shape, std::span<const float> values) {
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    dict += std::to_string(shape[i]);
    if (i + 1 < shape.size() || shape.size() == 1) dict += ",";
    if (i + 1 < shape.size()) dict += " ";
  }
  dict += "), }";
  // magic (6) + version (2) + header length (2) + header, a multiple of 64, '\n' last.
  const std::size_t unpadded = 10 + dict.size() + 1;
  dict.append((64 - unpadded % 64) % 64, ' ');
  dict += '\n';
  std::string out("\x93NUMPY\x01\x00", 8);
  put_u16(out, static_cast<std::uint32_t>(dict.size()));
  out += dict;
  const std::size_t header = out.size();
  out.resize(header + values.size_bytes());
  if (!values.empty()) std::memcpy(out.data() + header, values.data(), values.size_bytes());
  return out;
}

void write_npz(const std::string& path, const ParamLayout& layout, std::span<const float> params) {
  if (params.size() != static_cast<std::size_t>(layout.total_elems())) {
    throw ConfigError("weights for " + path + ": " + std::to_string(params.size()) + " values, the layout has " +
                      std::to_string(layout.total_elems()));
  }
  std::string archive;
  std::vector<Member> members;
  for (const TensorSpec& t : layout.tensors()) {
    const std::string npy = npy_bytes(t.shape, params.subspan(static_cast<std::size_t>(t.offset),
                                                              static_cast<std::size_t>(t.num_elems)));
    Member m;
    m.name = t.name + ".npy";
    m.size = checked_u32(npy.size(), path);
    m.crc = static_cast<std::uint32_t>(
        crc32(0L, reinterpret_cast<const Bytef*>(npy.data()), static_cast<uInt>(npy.size())));
    m.offset = checked_u32(archive.size(), path);
    put_u32(archive, 0x04034b50);
    put_common(archive, m);
    archive += m.name;
    archive += npy;
    checked_u32(archive.size(), path);
    members.push_back(std::move(m));
  }
  const std::uint32_t directory_offset = checked_u32(archive.size(), path);
  for (const Member& m : members) {
    put_u32(archive, 0x02014b50);
    put_u16(archive, 20);  // made by: version 2.0
    put_common(archive, m);
    put_u16(archive, 0);  // comment length
    put_u16(archive, 0);  // disk number
    put_u16(archive, 0);  // internal attributes
    put_u32(archive, 0);  // external attributes
    put_u32(archive, m.offset);
    archive += m.name;
  }
  const std::uint32_t directory_size = checked_u32(archive.size() - directory_offset, path);
  put_u32(archive, 0x06054b50);
  put_u16(archive, 0);  // this disk
  put_u16(archive, 0);  // disk with the directory
  put_u16(archive, static_cast<std::uint32_t>(members.size()));
  put_u16(archive, static_cast<std::uint32_t>(members.size()));
  put_u32(archive, directory_size);
  put_u32(archive, directory_offset);
  put_u16(archive, 0);  // comment length
  if (members.size() > 0xffff) throw Error("cannot write " + path + ": more than 65535 tensors");

  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) throw Error("cannot write " + tmp + ": " + std::strerror(errno));
  const bool ok = std::fwrite(archive.data(), 1, archive.size(), f) == archive.size();
  const int write_errno = errno;
  if (std::fclose(f) != 0 || !ok) {
    std::remove(tmp.c_str());
    throw Error("cannot write " + tmp + ": " + std::strerror(ok ? errno : write_errno));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    throw Error("cannot rename " + tmp + " to " + path + ": " + std::strerror(errno));
  }
}

}  // namespace pstrain
