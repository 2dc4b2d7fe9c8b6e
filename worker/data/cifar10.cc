#include "worker/data/cifar10.h"

#include <array>
#include <filesystem>
#include <utility>

#include "common/base/errors.h"
#include "worker/data/normalization.h"

namespace pstrain::data {

namespace {

constexpr std::int64_t kPlaneBytes = kCifar10Side * kCifar10Side;
constexpr std::int64_t kImageBytes = kCifar10Channels * kPlaneBytes;

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw DataError("read of " + path + ": " + what);
}

std::int64_t count_records(const std::string& path, std::int64_t num_bytes) {
  if (num_bytes == 0) fail(path, "empty file");
  if (num_bytes % kCifar10RecordBytes != 0) {
    fail(path, "size " + std::to_string(num_bytes) + " bytes is not a multiple of the " +
                   std::to_string(kCifar10RecordBytes) + "-byte record (" +
                   std::to_string(num_bytes / kCifar10RecordBytes) + " records and " +
                   std::to_string(num_bytes % kCifar10RecordBytes) + " bytes)");
  }
  return num_bytes / kCifar10RecordBytes;
}

// Converts the records of one file into dataset.images starting at sample
// `first_sample`, and appends their labels.
void convert_records(const std::string& path, const std::vector<std::uint8_t>& bytes,
                     std::int64_t first_sample,
                     const std::vector<std::array<float, 256>>& tables, Dataset& dataset) {
  const auto num_records = static_cast<std::int64_t>(bytes.size()) / kCifar10RecordBytes;
  float* out = dataset.images.data() + first_sample * kImageBytes;
  for (std::int64_t r = 0; r < num_records; ++r) {
    const std::uint8_t* record = bytes.data() + r * kCifar10RecordBytes;
    if (record[0] >= kCifar10Classes) {
      fail(path, "record " + std::to_string(r) + " is mislabelled: label " +
                     std::to_string(record[0]) + " >= num_classes " +
                     std::to_string(kCifar10Classes));
    }
    dataset.labels.push_back(record[0]);
    const std::uint8_t* pixels = record + 1;
    for (std::int64_t c = 0; c < kCifar10Channels; ++c) {
      const std::array<float, 256>& table = tables[static_cast<std::size_t>(c)];
      for (std::int64_t i = 0; i < kPlaneBytes; ++i) {
        out[c * kPlaneBytes + i] = table[pixels[c * kPlaneBytes + i]];
      }
    }
    out += kImageBytes;
  }
}

}  // namespace

Dataset load_cifar10_batches(const std::vector<std::string>& paths, std::string name,
                             std::int64_t max_file_bytes) {
  Dataset dataset;
  dataset.name = std::move(name);
  dataset.channels = kCifar10Channels;
  dataset.height = kCifar10Side;
  dataset.width = kCifar10Side;
  dataset.num_classes = kCifar10Classes;
  dataset.normalization = cifar10_stats();
  std::vector<std::array<float, 256>> tables;
  for (const ChannelStats& stats : dataset.normalization) tables.push_back(pixel_table(stats));
  std::vector<std::vector<std::uint8_t>> files;
  for (const std::string& path : paths) {
    files.push_back(read_all(path, max_file_bytes));
    dataset.num_samples += count_records(path, static_cast<std::int64_t>(files.back().size()));
  }
  dataset.images.resize(static_cast<std::size_t>(dataset.num_samples * kImageBytes));
  dataset.labels.reserve(static_cast<std::size_t>(dataset.num_samples));
  for (std::size_t f = 0; f < files.size(); ++f) {
    convert_records(paths[f], files[f], static_cast<std::int64_t>(dataset.labels.size()), tables,
                    dataset);
    files[f] = {};
  }
  dataset.validate();
  return dataset;
}

DatasetPair load_cifar10(const std::string& dir, std::int64_t max_file_bytes) {
  std::filesystem::path root(dir);
  if (!std::filesystem::exists(root / "test_batch.bin") &&
      std::filesystem::exists(root / "cifar-10-batches-bin" / "test_batch.bin")) {
    root /= "cifar-10-batches-bin";
  }
  std::vector<std::string> train_paths;
  for (int b = 1; b <= 5; ++b) {
    train_paths.push_back((root / ("data_batch_" + std::to_string(b) + ".bin")).string());
  }
  DatasetPair pair;
  pair.train = load_cifar10_batches(train_paths, "cifar10/train", max_file_bytes);
  pair.test = load_cifar10_batches({(root / "test_batch.bin").string()}, "cifar10/test",
                                   max_file_bytes);
  return pair;
}

}  // namespace pstrain::data
