// Reader of the CIFAR-10 binary version (cifar-10-binary.tar.gz from
// https://www.cs.toronto.edu/~kriz/cifar.html, extracted).
//
// Each batch file is a sequence of 3073-byte records: 1 label byte (0-9) then
// 3072 pixel bytes, the 32x32 red plane, then green, then blue (row-major),
// which is already CHW. The standard files hold 10000 records each; any
// positive whole number of records is accepted. Files may also be gzipped.
// Malformed input throws DataError naming the file: missing, empty, size not
// a multiple of 3073, above the size limit, label >= 10 ("mislabelled").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "worker/data/byte_reader.h"
#include "worker/data/dataset.h"

namespace pstrain::data {

inline constexpr int kCifar10Side = 32;
inline constexpr int kCifar10Channels = 3;
inline constexpr int kCifar10Classes = 10;
inline constexpr std::int64_t kCifar10RecordBytes = 1 + 3 * 32 * 32;

// Loads and concatenates the given batch files, in order, into one Dataset
// named `name`, normalized with cifar10_stats().
Dataset load_cifar10_batches(const std::vector<std::string>& paths, std::string name,
                             std::int64_t max_file_bytes = kDefaultMaxFileBytes);

// Loads `dir`/data_batch_1.bin .. data_batch_5.bin (train) and
// `dir`/test_batch.bin (test). `dir` may also be the folder that contains
// the extracted cifar-10-batches-bin/.
DatasetPair load_cifar10(const std::string& dir, std::int64_t max_file_bytes = kDefaultMaxFileBytes);

}  // namespace pstrain::data
