#include "worker/data/load_dataset.h"

#include <filesystem>

#include "common/base/errors.h"
#include "worker/data/cifar10.h"
#include "worker/data/idx_reader.h"
#include "worker/data/normalization.h"
#include "worker/data/synthetic.h"

namespace pstrain::data {

namespace {

namespace fs = std::filesystem;

// How to obtain each file-based dataset, for the "directory not found" error.
std::string how_to_get(std::string_view name) {
  if (name == "fashion-mnist") {
    return "install it with `apt-get install dataset-fashion-mnist` (it goes to " +
           std::string(kFashionMnistDefaultPath) +
           ") or download the four *-ubyte.gz files from "
           "https://github.com/zalandoresearch/fashion-mnist into that directory";
  }
  if (name == "mnist") {
    return "download train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz, "
           "t10k-images-idx3-ubyte.gz and t10k-labels-idx1-ubyte.gz "
           "(http://yann.lecun.com/exdb/mnist/) into that directory";
  }
  return "download https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz and extract it "
         "(tar xzf) into that directory";
}

void check_directory(std::string_view name, const std::string& dir) {
  std::error_code ec;
  if (fs::is_directory(dir, ec)) return;
  const std::string problem = fs::exists(dir, ec) ? "is not a directory" : "not found";
  throw DataError("load of " + std::string(name) + ": dataset directory " + dir + " " + problem +
                  "; " + how_to_get(name));
}

// dir/base.gz if it exists, else dir/base; DataError when neither does.
std::string find_idx_file(std::string_view name, const std::string& dir, const std::string& base) {
  std::error_code ec;
  const fs::path gz = fs::path(dir) / (base + ".gz");
  if (fs::exists(gz, ec)) return gz.string();
  const fs::path plain = fs::path(dir) / base;
  if (fs::exists(plain, ec)) return plain.string();
  throw DataError("load of " + std::string(name) + " from " + dir + ": neither " + base +
                  ".gz nor " + base + " found");
}

Dataset load_idx_split(std::string_view name, const std::string& dir, const std::string& prefix,
                       const std::string& split, const LoadOptions& options) {
  const ChannelStats stats = name == "mnist" ? mnist_stats()[0] : fashion_mnist_stats()[0];
  const std::string images_path = find_idx_file(name, dir, prefix + "-images-idx3-ubyte");
  const std::string labels_path = find_idx_file(name, dir, prefix + "-labels-idx1-ubyte");
  return load_idx(images_path, labels_path, std::string(name) + "/" + split, stats, 10,
                  options.max_file_bytes);
}

}  // namespace

std::string default_data_path(std::string_view name) {
  return name == "fashion-mnist" ? std::string(kFashionMnistDefaultPath) : std::string();
}

DatasetPair load_dataset(std::string_view name, const std::string& path,
                         const LoadOptions& options) {
  if (name == "synthetic") {
    return make_synthetic_pair(options.synthetic_train, options.synthetic_test, options.seed,
                               options.synthetic_noise);
  }
  if (name != "fashion-mnist" && name != "mnist" && name != "cifar10") {
    throw ConfigError("load of dataset '" + std::string(name) +
                      "': unknown name (expected fashion-mnist, mnist, cifar10 or synthetic)");
  }
  const std::string dir = path.empty() ? default_data_path(name) : path;
  if (dir.empty()) {
    throw ConfigError("load of dataset '" + std::string(name) +
                      "': no default path; set the data path");
  }
  check_directory(name, dir);
  if (name == "cifar10") return load_cifar10(dir, options.max_file_bytes);
  return {load_idx_split(name, dir, "train", "train", options),
          load_idx_split(name, dir, "t10k", "test", options)};
}

std::int64_t train_set_size(std::string_view name, const std::string& path, const LoadOptions& options) {
  if (name == "synthetic") return options.synthetic_train;
  if (name != "fashion-mnist" && name != "mnist" && name != "cifar10") {
    throw ConfigError("dataset '" + std::string(name) +
                      "': unknown name (expected fashion-mnist, mnist, cifar10 or synthetic)");
  }
  const std::string dir = path.empty() ? default_data_path(name) : path;
  if (dir.empty()) throw ConfigError("dataset '" + std::string(name) + "': no default path; set the data path");
  check_directory(name, dir);
  if (name != "cifar10") {
    const std::string labels = find_idx_file(name, dir, "train-labels-idx1-ubyte");
    return read_idx_u8(labels, 1, options.max_file_bytes).dims.at(0);
  }
  fs::path root(dir);
  if (!fs::exists(root / "data_batch_1.bin") && fs::exists(root / "cifar-10-batches-bin" / "data_batch_1.bin")) {
    root /= "cifar-10-batches-bin";
  }
  std::int64_t samples = 0;
  for (int b = 1; b <= 5; ++b) {
    const fs::path file = root / ("data_batch_" + std::to_string(b) + ".bin");
    std::error_code ec;
    const std::uintmax_t bytes = fs::file_size(file, ec);
    if (ec) throw DataError("load of cifar10: " + file.string() + ": " + ec.message());
    samples += static_cast<std::int64_t>(bytes) / kCifar10RecordBytes;
  }
  return samples;
}

}  // namespace pstrain::data
