// Helpers for the data tests: a temporary directory removed on destruction,
// writers of plain and gzip files (via zlib's gzopen/gzwrite) and of IDX /
// CIFAR-10 content, and a way to capture an exception's text.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include <doctest/doctest.h>
#include <zlib.h>

#include "tests/support/temp_dir.h"
#include "tests/support/throw_text.h"

namespace pstrain::data::testing {

using Bytes = std::vector<std::uint8_t>;

using pstrain::test::TempDir;  // tests/support/temp_dir.h

inline void write_plain(const std::string& path, const Bytes& bytes) {
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) throw std::runtime_error("cannot create " + path);
  const std::size_t put = bytes.empty() ? 0 : std::fwrite(bytes.data(), 1, bytes.size(), file);
  std::fclose(file);
  if (put != bytes.size()) throw std::runtime_error("short write to " + path);
}

inline void write_gzip(const std::string& path, const Bytes& bytes) {
  gzFile file = gzopen(path.c_str(), "wb");
  if (file == nullptr) throw std::runtime_error("cannot create " + path);
  const int put = bytes.empty() ? 0 : gzwrite(file, bytes.data(), static_cast<unsigned>(bytes.size()));
  gzclose(file);
  if (put != static_cast<int>(bytes.size())) throw std::runtime_error("short gzwrite to " + path);
}

inline Bytes read_plain(const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) throw std::runtime_error("cannot open " + path);
  Bytes bytes;
  int c = 0;
  while ((c = std::fgetc(file)) != EOF) bytes.push_back(static_cast<std::uint8_t>(c));
  std::fclose(file);
  return bytes;
}

// IDX content: magic 00 00 dtype num_dims, big-endian dims, then `data`.
inline Bytes make_idx(std::uint8_t dtype, const std::vector<std::uint32_t>& dims, const Bytes& data) {
  Bytes bytes{0, 0, dtype, static_cast<std::uint8_t>(dims.size())};
  for (const std::uint32_t dim : dims) {
    for (int shift = 24; shift >= 0; shift -= 8) bytes.push_back(static_cast<std::uint8_t>(dim >> shift));
  }
  bytes.insert(bytes.end(), data.begin(), data.end());
  return bytes;
}

// Pixels of `count` images of side x side: pixel j of image i is (i * 7 + j) % 256.
inline Bytes test_pixels(std::uint32_t count, std::uint32_t side) {
  Bytes pixels;
  for (std::uint32_t i = 0; i < count; ++i) {
    for (std::uint32_t j = 0; j < side * side; ++j) pixels.push_back(static_cast<std::uint8_t>((i * 7 + j) % 256));
  }
  return pixels;
}

// Labels 0, 1, ..., num_classes-1, 0, 1, ...
inline Bytes test_labels(std::uint32_t count, std::uint32_t num_classes) {
  Bytes labels;
  for (std::uint32_t i = 0; i < count; ++i) labels.push_back(static_cast<std::uint8_t>(i % num_classes));
  return labels;
}

// One CIFAR-10 record: label, then 3072 pixels; pixel j is (seed + j) % 256.
inline Bytes cifar_record(std::uint8_t label, std::uint32_t seed) {
  Bytes record{label};
  for (std::uint32_t j = 0; j < 3072; ++j) record.push_back(static_cast<std::uint8_t>((seed + j) % 256));
  return record;
}

// The text of the E thrown by f(); "" when it throws nothing.
using pstrain::test::thrown_text;

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace pstrain::data::testing

// Checks that `text` contains `part`; on failure prints the whole text.
#define CHECK_HAS(text, part)                                                 \
  do {                                                                        \
    const std::string check_has_text = (text);                               \
    CHECK_MESSAGE(::pstrain::data::testing::contains(check_has_text, (part)), \
                  "text: " << check_has_text);                                \
  } while (false)

namespace pstrain::data::testing {

}  // namespace pstrain::data::testing
