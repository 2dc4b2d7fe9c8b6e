// load_dataset: names, directories, .gz preference, and the real
// Fashion-MNIST files when installed.
#include "worker/data/load_dataset.h"

#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <filesystem>

#include "common/base/errors.h"
#include "tests/data/data_test_util.h"
#include "tests/support/skip.h"

namespace pstrain::data {
namespace {

using testing::Bytes;
using testing::make_idx;
using testing::TempDir;
using testing::thrown_text;

// Writes the four IDX files of a 28x28 dataset with `count` train and test images.
void write_idx_set(const TempDir& dir, std::uint32_t count, bool gzip) {
  const std::string suffix = gzip ? ".gz" : "";
  auto write = gzip ? testing::write_gzip : testing::write_plain;
  for (const std::string prefix : {"train", "t10k"}) {
    write(dir.file(prefix + "-images-idx3-ubyte" + suffix),
          make_idx(0x08, {count, 28, 28}, testing::test_pixels(count, 28)));
    write(dir.file(prefix + "-labels-idx1-ubyte" + suffix),
          make_idx(0x08, {count}, testing::test_labels(count, 10)));
  }
}

TEST_CASE("load_dataset: IDX directory, preferring .gz over plain files") {
  TempDir dir;
  write_idx_set(dir, 3, false);
  const DatasetPair plain = load_dataset("mnist", dir.path().string());
  CHECK(plain.train.name == "mnist/train");
  CHECK(plain.test.name == "mnist/test");
  CHECK(plain.train.num_samples == 3);
  CHECK(plain.train.normalization[0].mean == mnist_stats()[0].mean);
  write_idx_set(dir, 5, true);
  const DatasetPair gz = load_dataset("fashion-mnist", dir.path().string());
  CHECK(gz.train.num_samples == 5);
  CHECK(gz.test.num_samples == 5);
  CHECK(gz.train.name == "fashion-mnist/train");
  CHECK(gz.train.normalization[0].stddev == fashion_mnist_stats()[0].stddev);
}

TEST_CASE("load_dataset: unknown names, missing directories and files") {
  CHECK_HAS(thrown_text<ConfigError>([] { load_dataset("imagenet", "/x"); }),
                 "load of dataset 'imagenet': unknown name (expected fashion-mnist, mnist, cifar10 or synthetic)");
  CHECK_HAS(thrown_text<ConfigError>([] { load_dataset("cifar10", ""); }),
                 "load of dataset 'cifar10': no default path");
  const std::string fashion = thrown_text<DataError>([] { load_dataset("fashion-mnist", "/no/such/dir"); });
  CHECK_HAS(fashion, "load of fashion-mnist: dataset directory /no/such/dir not found");
  CHECK_HAS(fashion, "apt-get install dataset-fashion-mnist");
  CHECK_HAS(thrown_text<DataError>([] { load_dataset("mnist", "/no/such/dir"); }),
                 "t10k-labels-idx1-ubyte.gz");
  CHECK_HAS(thrown_text<DataError>([] { load_dataset("cifar10", "/no/such/dir"); }),
                 "cifar-10-binary.tar.gz");
  TempDir dir;
  testing::write_plain(dir.file("a-file"), {1});
  CHECK_HAS(thrown_text<DataError>([&] { load_dataset("mnist", dir.file("a-file")); }),
                 "dataset directory " + dir.file("a-file") + " is not a directory");
  CHECK_HAS(thrown_text<DataError>([&] { load_dataset("mnist", dir.path().string()); }),
                 "load of mnist from " + dir.path().string() +
                     ": neither train-images-idx3-ubyte.gz nor train-images-idx3-ubyte found");
}

TEST_CASE("load_dataset: synthetic uses the options") {
  LoadOptions options;
  options.seed = 5;
  options.synthetic_train = 100;
  options.synthetic_test = 30;
  const DatasetPair pair = load_dataset("synthetic", "", options);
  CHECK(pair.train.num_samples == 100);
  CHECK(pair.test.num_samples == 30);
  CHECK(pair.train.height == 28);
  CHECK(pair.train.images == load_dataset("synthetic", "/ignored", options).train.images);
}

// Its own CTest entry (data_fashion_mnist), skipped without the dataset.
TEST_CASE("load_dataset: the real Fashion-MNIST files") {
  const std::string dir = default_data_path("fashion-mnist");
  if (!std::filesystem::is_directory(dir)) {
    return pstrain::test::skip_case(dir + " missing (apt-get install dataset-fashion-mnist)");
  }
  const auto start = std::chrono::steady_clock::now();
  const DatasetPair pair = load_dataset("fashion-mnist", "");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  MESSAGE("loaded Fashion-MNIST (train + test) in " << seconds << " s");
  CHECK(pair.train.num_samples == 60000);
  CHECK(pair.test.num_samples == 10000);
  for (const Dataset* dataset : {&pair.train, &pair.test}) {
    CHECK(dataset->channels == 1);
    CHECK(dataset->height == 28);
    CHECK(dataset->width == 28);
    CHECK(dataset->num_classes == 10);
    std::vector<int> counts(10, 0);
    for (const std::int32_t label : dataset->labels) {
      REQUIRE(label >= 0);
      REQUIRE(label < 10);
      ++counts[static_cast<std::size_t>(label)];
    }
    // Fashion-MNIST is balanced: 6000 / 1000 per class.
    CHECK(counts == std::vector<int>(10, static_cast<int>(dataset->num_samples / 10)));
  }
  // The normalization constants fit the training set: mean ~0, std ~1.
  double sum = 0, sum_sq = 0;
  for (const float v : pair.train.images) {
    sum += v;
    sum_sq += double{v} * v;
  }
  const double n = static_cast<double>(pair.train.images.size());
  const double mean = sum / n;
  CHECK(std::abs(mean) < 0.01);
  CHECK(std::sqrt(sum_sq / n - mean * mean) == doctest::Approx(1.0).epsilon(0.01));
}

}  // namespace
}  // namespace pstrain::data
