// IDX reader: valid plain and gzip files, and every malformed case with the
// text of its DataError.
#include "worker/data/idx_reader.h"

#include <doctest/doctest.h>

#include <filesystem>

#include <unistd.h>

#include "common/base/errors.h"
#include "tests/data/data_test_util.h"
#include "tests/support/skip.h"

namespace pstrain::data {
namespace {

using testing::Bytes;
using testing::make_idx;
using testing::TempDir;
using testing::thrown_text;

constexpr std::uint32_t kCount = 5;
constexpr std::uint32_t kSide = 4;
constexpr ChannelStats kStats{0.25f, 0.5f};

Bytes good_images() { return make_idx(0x08, {kCount, kSide, kSide}, testing::test_pixels(kCount, kSide)); }
Bytes good_labels() { return make_idx(0x08, {kCount}, testing::test_labels(kCount, 10)); }

// Writes images (and good labels) and returns the DataError text of loading them.
std::string load_error(const TempDir& dir, const Bytes& images, bool gzip = false) {
  const std::string images_path = dir.file("images");
  const std::string labels_path = dir.file("labels");
  if (gzip) {
    testing::write_gzip(images_path, images);
  } else {
    testing::write_plain(images_path, images);
  }
  testing::write_plain(labels_path, good_labels());
  return thrown_text<DataError>([&] { load_idx(images_path, labels_path, "t", kStats); });
}

std::string label_error(const TempDir& dir, const Bytes& labels) {
  testing::write_plain(dir.file("images"), good_images());
  testing::write_plain(dir.file("labels"), labels);
  return thrown_text<DataError>(
      [&] { load_idx(dir.file("images"), dir.file("labels"), "t", kStats); });
}

void check_good_dataset(const Dataset& dataset) {
  CHECK(dataset.name == "t/train");
  CHECK(dataset.num_samples == kCount);
  CHECK(dataset.channels == 1);
  CHECK(dataset.height == static_cast<int>(kSide));
  CHECK(dataset.width == static_cast<int>(kSide));
  CHECK(dataset.num_classes == 10);
  REQUIRE(dataset.images.size() == kCount * kSide * kSide);
  const Bytes pixels = testing::test_pixels(kCount, kSide);
  for (std::size_t i = 0; i < pixels.size(); ++i) {
    const float expected = (static_cast<float>(pixels[i]) / 255.0f - kStats.mean) / kStats.stddev;
    REQUIRE(dataset.images[i] == doctest::Approx(expected));
  }
  for (std::uint32_t i = 0; i < kCount; ++i) CHECK(dataset.labels[i] == static_cast<int>(i % 10));
}

TEST_CASE("idx: plain and gzip files load to the same normalized dataset") {
  TempDir dir;
  testing::write_plain(dir.file("images"), good_images());
  testing::write_plain(dir.file("labels"), good_labels());
  testing::write_gzip(dir.file("images.gz"), good_images());
  testing::write_gzip(dir.file("labels.gz"), good_labels());
  const Dataset plain = load_idx(dir.file("images"), dir.file("labels"), "t/train", kStats);
  const Dataset gzip = load_idx(dir.file("images.gz"), dir.file("labels.gz"), "t/train", kStats);
  check_good_dataset(plain);
  check_good_dataset(gzip);
  CHECK(plain.images == gzip.images);
  CHECK(plain.labels == gzip.labels);
}

TEST_CASE("idx: compression is detected from the content, not the name") {
  TempDir dir;
  testing::write_gzip(dir.file("images-plain-name"), good_images());
  testing::write_plain(dir.file("labels-gzip-name.gz"), good_labels());
  check_good_dataset(
      load_idx(dir.file("images-plain-name"), dir.file("labels-gzip-name.gz"), "t/train", kStats));
  CHECK(ByteReader(dir.file("images-plain-name")).compressed());
  CHECK_FALSE(ByteReader(dir.file("labels-gzip-name.gz")).compressed());
}

TEST_CASE("idx: missing files and directories") {
  TempDir dir;
  testing::write_plain(dir.file("labels"), good_labels());
  const std::string missing = thrown_text<DataError>(
      [&] { load_idx(dir.file("nope"), dir.file("labels"), "t", kStats); });
  CHECK_HAS(missing, "read of " + dir.file("nope") + ": file not found");
  std::filesystem::create_directory(dir.file("a-dir"));
  const std::string not_file = thrown_text<DataError>(
      [&] { load_idx(dir.file("a-dir"), dir.file("labels"), "t", kStats); });
  CHECK_HAS(not_file, "read of " + dir.file("a-dir") + ": not a regular file");
}

// Its own CTest entry (data_unreadable_file), skipped as root.
TEST_CASE("idx: a file it may not read") {
  if (geteuid() == 0) return pstrain::test::skip_case("root can read a file with mode 000");
  TempDir dir;
  testing::write_plain(dir.file("labels"), good_labels());
  testing::write_plain(dir.file("locked"), good_images());
  std::filesystem::permissions(dir.file("locked"), std::filesystem::perms::none);
  CHECK_HAS(thrown_text<DataError>([&] { load_idx(dir.file("locked"), dir.file("labels"), "t", kStats); }),
            "read of " + dir.file("locked") + ": cannot open: Permission denied");
}

TEST_CASE("idx: bad magic, dtype and number of dims") {
  TempDir dir;
  Bytes bad_magic = good_images();
  bad_magic[0] = 0x01;
  bad_magic[1] = 0x02;
  CHECK_HAS(load_error(dir, bad_magic),
                 "read of " + dir.file("images") + ": bad magic number 0x01020803: expected 0x00000803");
  Bytes float_dtype = good_images();
  float_dtype[2] = 0x0d;
  CHECK_HAS(load_error(dir, float_dtype), "wrong dtype code 0x0d: expected 0x08 (unsigned byte)");
  const Bytes two_dims = make_idx(0x08, {kCount, kSide * kSide}, testing::test_pixels(kCount, kSide));
  CHECK_HAS(load_error(dir, two_dims), "wrong number of dims: 2, expected 3");
  const Bytes labels_two_dims = make_idx(0x08, {kCount, 1}, testing::test_labels(kCount, 10));
  CHECK_HAS(label_error(dir, labels_two_dims),
                 "read of " + dir.file("labels") + ": wrong number of dims: 2, expected 1");
}

TEST_CASE("idx: truncated header and data, plain and gzip") {
  TempDir dir;
  CHECK_HAS(load_error(dir, {}), "truncated header: expected at least 4 bytes, got 0");
  const Bytes images = good_images();
  const Bytes header_cut(images.begin(), images.begin() + 10);
  CHECK_HAS(load_error(dir, header_cut), "truncated header: expected 16 bytes, got 10");
  const Bytes data_cut(images.begin(), images.end() - 6);
  const std::string expected = "read of " + dir.file("images") + ": truncated: expected 96 bytes, got 90";
  CHECK_HAS(load_error(dir, data_cut), expected);
  CHECK_HAS(load_error(dir, data_cut, true), expected);
}

TEST_CASE("idx: trailing garbage, plain and gzip") {
  TempDir dir;
  Bytes longer = good_images();
  longer.insert(longer.end(), {1, 2, 3});
  const std::string expected = "trailing garbage: 3 bytes after the expected 96";
  CHECK_HAS(load_error(dir, longer), expected);
  CHECK_HAS(load_error(dir, longer, true), expected);
}

TEST_CASE("idx: zero dims and sizes above the limit are refused before allocating") {
  TempDir dir;
  CHECK_HAS(load_error(dir, make_idx(0x08, {kCount, 0, kSide}, {})), "dim 1 is 0");
  const Bytes huge = make_idx(0x08, {4000000000u, 4000000000u, 4000000000u}, {});
  CHECK_HAS(load_error(dir, huge),
                 "header declares 4000000000x4000000000x4000000000 bytes of data, more than the "
                 "limit of 1073741824 bytes per file");
  testing::write_plain(dir.file("images"), good_images());
  testing::write_plain(dir.file("labels"), good_labels());
  const std::string small_limit = thrown_text<DataError>(
      [&] { load_idx(dir.file("images"), dir.file("labels"), "t", kStats, 10, 95); });
  CHECK_HAS(small_limit, "more than the limit of 95 bytes per file");
  CHECK_NOTHROW(load_idx(dir.file("images"), dir.file("labels"), "t", kStats, 10, 96));
  const Bytes too_wide = make_idx(0x08, {1, 1, 70000}, Bytes(70000, 0));
  CHECK_HAS(load_error(dir, too_wide), "image size 1x70000 above the limit of 65536 per side");
}

TEST_CASE("idx: labels out of range and count mismatch") {
  TempDir dir;
  Bytes labels = testing::test_labels(kCount, 10);
  labels[3] = 10;
  CHECK_HAS(label_error(dir, make_idx(0x08, {kCount}, labels)),
                 "read of " + dir.file("labels") + ": sample 3 is mislabelled: label 10 >= num_classes 10");
  const Bytes fewer = make_idx(0x08, {kCount - 1}, testing::test_labels(kCount - 1, 10));
  CHECK_HAS(label_error(dir, fewer), "load of t: image count 5 (" + dir.file("images") +
                                              ") != label count 4 (" + dir.file("labels") + ")");
}

TEST_CASE("idx: corrupt and cut gzip streams") {
  TempDir dir;
  testing::write_gzip(dir.file("good.gz"), good_images());
  const Bytes compressed = testing::read_plain(dir.file("good.gz"));
  REQUIRE(compressed.size() > 30);

  Bytes bad_crc = compressed;
  bad_crc[bad_crc.size() - 6] ^= 0xff;  // inside the CRC-32 of the trailer
  testing::write_plain(dir.file("images"), bad_crc);
  testing::write_plain(dir.file("labels"), good_labels());
  CHECK_HAS(thrown_text<DataError>([&] {
                   load_idx(dir.file("images"), dir.file("labels"), "t", kStats);
                 }),
                 "read of " + dir.file("images") + ": corrupt gzip data: incorrect data check");

  const Bytes no_trailer(compressed.begin(), compressed.end() - 8);
  testing::write_plain(dir.file("images"), no_trailer);
  CHECK_HAS(thrown_text<DataError>([&] {
                   load_idx(dir.file("images"), dir.file("labels"), "t", kStats);
                 }),
                 "read of " + dir.file("images") + ": truncated gzip stream: unexpected end of file");

  const Bytes half(compressed.begin(), compressed.begin() + 14);
  testing::write_plain(dir.file("images"), half);
  CHECK_HAS(thrown_text<DataError>([&] {
                   load_idx(dir.file("images"), dir.file("labels"), "t", kStats);
                 }),
                 "read of " + dir.file("images") + ": truncated");
}

}  // namespace
}  // namespace pstrain::data
