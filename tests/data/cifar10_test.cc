// CIFAR-10 binary reader on tiny batch files written by the test.
#include "worker/data/cifar10.h"

#include <doctest/doctest.h>

#include <filesystem>

#include "common/base/errors.h"
#include "tests/data/data_test_util.h"
#include "worker/data/normalization.h"

namespace pstrain::data {
namespace {

using testing::Bytes;
using testing::TempDir;
using testing::thrown_text;

// Batch b of the train set holds b records, the test batch 2; record r of
// batch b has label (b + r) % 10 and pixel seed 100 * b + r.
Bytes batch_bytes(int b, int num_records) {
  Bytes bytes;
  for (int r = 0; r < num_records; ++r) {
    const Bytes record = testing::cifar_record(static_cast<std::uint8_t>((b + r) % 10),
                                               static_cast<std::uint32_t>(100 * b + r));
    bytes.insert(bytes.end(), record.begin(), record.end());
  }
  return bytes;
}

void write_batches(const std::filesystem::path& dir, bool gzip) {
  std::filesystem::create_directories(dir);
  for (int b = 1; b <= 5; ++b) {
    const std::string path = (dir / ("data_batch_" + std::to_string(b) + ".bin")).string();
    gzip ? testing::write_gzip(path, batch_bytes(b, b)) : testing::write_plain(path, batch_bytes(b, b));
  }
  testing::write_plain((dir / "test_batch.bin").string(), batch_bytes(0, 2));
}

float normalized(std::uint8_t pixel, int channel) {
  const ChannelStats stats = cifar10_stats()[static_cast<std::size_t>(channel)];
  return (static_cast<float>(pixel) / 255.0f - stats.mean) / stats.stddev;
}

void check_pair(const DatasetPair& pair) {
  const Dataset& train = pair.train;
  CHECK(train.name == "cifar10/train");
  CHECK(train.num_samples == 1 + 2 + 3 + 4 + 5);
  CHECK(train.channels == 3);
  CHECK(train.height == 32);
  CHECK(train.width == 32);
  CHECK(train.num_classes == 10);
  CHECK(pair.test.name == "cifar10/test");
  CHECK(pair.test.num_samples == 2);
  // Sample 4 is batch 3, record 1: label 4, pixel j = (301 + j) % 256, CHW.
  CHECK(train.labels[4] == 4);
  const float* image = train.images.data() + 4 * 3072;
  for (int c = 0; c < 3; ++c) {
    for (int i : {0, 5, 1023}) {
      const auto pixel = static_cast<std::uint8_t>((301 + c * 1024 + i) % 256);
      CHECK(image[c * 1024 + i] == doctest::Approx(normalized(pixel, c)));
    }
  }
  CHECK(pair.test.labels[1] == 1);
}

TEST_CASE("cifar10: plain and gzip batches load, also from the extracted parent folder") {
  TempDir dir;
  write_batches(dir.path() / "plain", false);
  write_batches(dir.path() / "gz", true);
  write_batches(dir.path() / "parent" / "cifar-10-batches-bin", false);
  check_pair(load_cifar10(dir.file("plain")));
  check_pair(load_cifar10(dir.file("gz")));
  check_pair(load_cifar10(dir.file("parent")));
  CHECK(load_cifar10(dir.file("plain")).train.images == load_cifar10(dir.file("gz")).train.images);
}

TEST_CASE("cifar10: malformed batch files") {
  TempDir dir;
  const std::string path = dir.file("batch.bin");
  auto error = [&](const Bytes& bytes, std::int64_t max_bytes = kDefaultMaxFileBytes) {
    testing::write_plain(path, bytes);
    return thrown_text<DataError>([&] { load_cifar10_batches({path}, "c", max_bytes); });
  };
  CHECK_HAS(error({}), "read of " + path + ": empty file");
  Bytes cut = batch_bytes(1, 2);
  cut.resize(cut.size() - 73);
  CHECK_HAS(error(cut), "read of " + path + ": size 6073 bytes is not a multiple of the "
                                 "3073-byte record (1 records and 3000 bytes)");
  Bytes bad_label = batch_bytes(1, 3);
  bad_label[2 * 3073] = 10;
  CHECK_HAS(error(bad_label), "read of " + path + ": record 2 is mislabelled: label 10 >= num_classes 10");
  CHECK_HAS(error(batch_bytes(1, 2), 6000), "read of " + path + ": larger than the limit of 6000 bytes");
  CHECK(error(batch_bytes(1, 2), 6146) .empty());
  const std::string missing = thrown_text<DataError>([&] { load_cifar10(dir.file("none")); });
  CHECK_HAS(missing, "read of " + dir.file("none") + "/data_batch_1.bin: file not found");
}

}  // namespace
}  // namespace pstrain::data
