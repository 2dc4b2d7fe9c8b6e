// common/checkpoint/npz.h: the .npy header NumPy expects, the zip structure around it,
// and the errors for weights that do not match the layout.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <zlib.h>

#include "common/base/errors.h"
#include "common/checkpoint/npz.h"
#include "tests/support/temp_dir.h"

namespace pstrain {
namespace {

namespace fs = std::filesystem;

std::uint32_t u32_at(const std::string& s, std::size_t at) {
  std::uint32_t v = 0;
  std::memcpy(&v, s.data() + at, 4);
  return v;
}
std::uint16_t u16_at(const std::string& s, std::size_t at) {
  std::uint16_t v = 0;
  std::memcpy(&v, s.data() + at, 2);
  return v;
}

}  // namespace

TEST_CASE("npy bytes: magic, version 1.0, a dict header padded to 64 bytes, then the floats") {
  const std::vector<std::int64_t> shape{2, 3};
  const std::vector<float> values{1, 2, 3, 4, 5, 6};
  const std::string npy = npy_bytes(shape, values);
  REQUIRE(npy.size() > 10);
  CHECK(npy.substr(0, 8) == std::string("\x93NUMPY\x01\x00", 8));
  const std::size_t header_len = u16_at(npy, 8);
  CHECK((10 + header_len) % 64 == 0);
  const std::string header = npy.substr(10, header_len);
  CHECK(header.rfind("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 0) == 0);
  CHECK(header.back() == '\n');
  CHECK(npy.size() == 10 + header_len + 6 * 4);
  CHECK(std::memcmp(npy.data() + 10 + header_len, values.data(), 24) == 0);

  // One dimension needs the trailing comma of a Python 1-tuple; none is a scalar.
  CHECK(npy_bytes(std::vector<std::int64_t>{5}, std::vector<float>(5)).find("'shape': (5,), }") !=
        std::string::npos);
  CHECK(npy_bytes(std::vector<std::int64_t>{}, std::vector<float>(1)).find("'shape': (), }") != std::string::npos);
}

TEST_CASE("write_npz: one stored member per tensor with its crc, a central directory, no temporary left") {
  ParamLayout layout;
  layout.add("conv.weight", {2, 1, 2, 2});
  layout.add("conv.bias", {2});
  std::vector<float> params(static_cast<std::size_t>(layout.total_elems()));
  for (std::size_t i = 0; i < params.size(); ++i) params[i] = static_cast<float>(i) * 0.5f - 1.0f;

  const pstrain::test::TempDir temp("npz");
  const fs::path& dir = temp.path();
  const std::string path = (dir / "weights.npz").string();
  write_npz(path, layout, params);
  CHECK_FALSE(fs::exists(path + ".tmp"));
  std::ifstream in(path, std::ios::binary);
  const std::string zip((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());

  // End of central directory: the last 22 bytes (no comment).
  REQUIRE(zip.size() > 22);
  const std::size_t eocd = zip.size() - 22;
  CHECK(u32_at(zip, eocd) == 0x06054b50u);
  CHECK(u16_at(zip, eocd + 10) == 2);  // entries
  std::size_t entry = u32_at(zip, eocd + 16);
  std::size_t offset_expected = 0;
  for (const TensorSpec& t : layout.tensors()) {
    CAPTURE(t.name);
    REQUIRE(u32_at(zip, entry) == 0x02014b50u);
    const std::uint32_t crc = u32_at(zip, entry + 16);
    const std::uint32_t size = u32_at(zip, entry + 20);
    const std::uint16_t name_len = u16_at(zip, entry + 28);
    const std::size_t local = u32_at(zip, entry + 42);
    CHECK(zip.substr(entry + 46, name_len) == t.name + ".npy");
    CHECK(local == offset_expected);
    REQUIRE(u32_at(zip, local) == 0x04034b50u);
    CHECK(u16_at(zip, local + 8) == 0);  // stored
    const std::size_t data = local + 30 + u16_at(zip, local + 26);
    const std::string member = zip.substr(data, size);
    CHECK(crc == crc32(0L, reinterpret_cast<const Bytef*>(member.data()), static_cast<uInt>(member.size())));
    CHECK(member == npy_bytes(t.shape, std::span<const float>(params).subspan(
                                           static_cast<std::size_t>(t.offset), static_cast<std::size_t>(t.num_elems))));
    offset_expected = data + size;
    entry += 46 + name_len;
  }
}

TEST_CASE("write_npz refuses weights that do not match the layout, and an unwritable path") {
  ParamLayout layout;
  layout.add("w", {3});
  CHECK_THROWS_WITH_AS(write_npz("/tmp/never.npz", layout, std::vector<float>(2)),
                       "weights for /tmp/never.npz: 2 values, the layout has 3", ConfigError);
  CHECK_THROWS_WITH_AS(write_npz("/nonexistent-dir/w.npz", layout, std::vector<float>(3)),
                       doctest::Contains("cannot write /nonexistent-dir/w.npz.tmp"), Error);
}

}  // namespace pstrain
