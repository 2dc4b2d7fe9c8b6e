// Loading a dataset by name: the entry point the training code uses.
//
//   "fashion-mnist", "mnist": `path` is a directory holding the IDX files
//       train-images-idx3-ubyte, train-labels-idx1-ubyte,
//       t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte, each either with a
//       .gz suffix (preferred when both exist) or plain. 1x28x28, 10 classes.
//   "cifar10": `path` is the extracted CIFAR-10 binary version (see
//       cifar10.h). 3x32x32, 10 classes.
//   "synthetic": generated (see synthetic.h) from options.seed with
//       options.synthetic_train / synthetic_test samples; `path` is ignored.
//       1x28x28, 10 classes.
// An empty `path` means default_data_path(name).
//
// Errors: an unknown name or a missing default path is a ConfigError; a
// missing directory is a DataError that says how to get the dataset; a
// missing or malformed file is a DataError from the readers.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "worker/data/byte_reader.h"
#include "worker/data/dataset.h"

namespace pstrain::data {

inline constexpr std::string_view kFashionMnistDefaultPath = "/usr/share/datasets/fashion-mnist";

struct LoadOptions {
  std::uint64_t seed = 1;                // "synthetic" only
  std::int64_t synthetic_train = 2048;   // "synthetic" only
  std::int64_t synthetic_test = 512;     // "synthetic" only
  double synthetic_noise = 1.5;          // "synthetic" only: noise std (synthetic.h)
  std::int64_t max_file_bytes = kDefaultMaxFileBytes;  // per file, decompressed
};

// Where a dataset lives when no path is given: kFashionMnistDefaultPath for
// "fashion-mnist" (Debian's dataset-fashion-mnist package), "" otherwise.
std::string default_data_path(std::string_view name);

DatasetPair load_dataset(std::string_view name, const std::string& path,
                         const LoadOptions& options = {});

// The number of training samples load_dataset would return, found cheaply
// (synthetic: options.synthetic_train; IDX: the labels file's header count,
// read whole, 60 KB; CIFAR-10: the batch files' sizes), for checks made
// before any process starts (the batch against each worker's shard). The
// same errors as load_dataset for a missing directory or file.
std::int64_t train_set_size(std::string_view name, const std::string& path, const LoadOptions& options = {});

}  // namespace pstrain::data
