// Reader of IDX files, the format of MNIST and Fashion-MNIST, gzip-compressed
// or plain (detected from the content, see byte_reader.h).
//
// IDX layout (all integers big-endian):
//   bytes 0-1: zero; byte 2: dtype code (0x08 = unsigned byte, the only one
//   accepted here); byte 3: number of dims; then one uint32 per dim; then the
//   data, row-major, with nothing after it.
// Images files have 3 dims [N, height, width]; labels files 1 dim [N].
//
// Every malformed input throws DataError naming the file and what is wrong:
// missing or unreadable file, bad magic number, wrong dtype code, wrong number
// of dims, zero dim, size above the limit (checked before allocating),
// truncated data (expected vs got bytes), trailing garbage, corrupt gzip,
// label >= num_classes ("mislabelled"), image count != label count.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "worker/data/byte_reader.h"
#include "worker/data/dataset.h"
#include "worker/data/normalization.h"

namespace pstrain::data {

// The raw content of an unsigned-byte IDX file.
struct IdxArray {
  std::vector<std::int64_t> dims;   // as in the header, each > 0
  std::vector<std::uint8_t> data;   // product(dims) bytes, row-major
};

// Reads an unsigned-byte IDX file that must have `expected_num_dims` dims and
// at most max_bytes bytes in all (header included).
IdxArray read_idx_u8(const std::string& path, int expected_num_dims,
                     std::int64_t max_bytes = kDefaultMaxFileBytes);

// Loads an images file and its labels file into a single-channel Dataset
// named `name`, normalizing pixels with `stats` (see normalization.h).
Dataset load_idx(const std::string& images_path, const std::string& labels_path, std::string name,
                 ChannelStats stats, int num_classes = 10,
                 std::int64_t max_file_bytes = kDefaultMaxFileBytes);

}  // namespace pstrain::data
