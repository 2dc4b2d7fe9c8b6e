#include "worker/data/idx_reader.h"

#include <array>
#include <cstdio>
#include <utility>

#include "common/errors.h"

namespace pstrain::data {

namespace {

constexpr std::uint8_t kDtypeUnsignedByte = 0x08;
constexpr std::int64_t kMaxImageSide = 1 << 16;

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw DataError("read of " + path + ": " + what);
}

std::string hex(std::uint32_t value, int num_digits) {
  std::array<char, 16> text{};
  std::snprintf(text.data(), text.size(), "0x%0*x", num_digits, value);
  return text.data();
}

std::uint32_t big_endian_u32(const std::uint8_t* bytes) {
  return (std::uint32_t{bytes[0]} << 24) | (std::uint32_t{bytes[1]} << 16) |
         (std::uint32_t{bytes[2]} << 8) | std::uint32_t{bytes[3]};
}

void check_magic(const std::string& path, const std::array<std::uint8_t, 4>& magic,
                 int expected_num_dims) {
  const std::uint32_t expected = (std::uint32_t{kDtypeUnsignedByte} << 8) |
                                 static_cast<std::uint32_t>(expected_num_dims);
  if (magic[0] != 0 || magic[1] != 0) {
    fail(path, "bad magic number " + hex(big_endian_u32(magic.data()), 8) + ": expected " +
                   hex(expected, 8) + " (IDX, unsigned byte, " + std::to_string(expected_num_dims) +
                   " dims)");
  }
  if (magic[2] != kDtypeUnsignedByte) {
    fail(path, "wrong dtype code " + hex(magic[2], 2) + ": expected " +
                   hex(kDtypeUnsignedByte, 2) + " (unsigned byte)");
  }
  if (magic[3] != expected_num_dims) {
    fail(path, "wrong number of dims: " + std::to_string(magic[3]) + ", expected " +
                   std::to_string(expected_num_dims));
  }
}

std::string dims_text(const std::vector<std::int64_t>& dims) {
  std::string text;
  for (const std::int64_t dim : dims) {
    if (!text.empty()) text += 'x';
    text += std::to_string(dim);
  }
  return text;
}

// Reads the dims following the magic number; returns them with the total
// file size in bytes (header + data), checked against max_bytes.
std::pair<std::vector<std::int64_t>, std::int64_t> read_dims(ByteReader& reader, int num_dims,
                                                              std::int64_t max_bytes) {
  const std::int64_t header_bytes = 4 + 4 * std::int64_t{num_dims};
  std::vector<std::uint8_t> raw(static_cast<std::size_t>(4 * num_dims));
  const std::int64_t got = reader.read(raw.data(), static_cast<std::int64_t>(raw.size()));
  if (got < static_cast<std::int64_t>(raw.size())) {
    fail(reader.path(), "truncated header: expected " + std::to_string(header_bytes) +
                            " bytes, got " + std::to_string(4 + got));
  }
  std::vector<std::int64_t> dims;
  std::int64_t total_bytes = header_bytes;
  for (int d = 0; d < num_dims; ++d) dims.push_back(big_endian_u32(raw.data() + 4 * d));
  std::int64_t data_bytes = 1;
  for (std::size_t d = 0; d < dims.size(); ++d) {
    if (dims[d] == 0) fail(reader.path(), "dim " + std::to_string(d) + " is 0");
    if (data_bytes > (max_bytes - header_bytes) / dims[d]) {
      fail(reader.path(), "header declares " + dims_text(dims) + " bytes of data, more than the " +
                              "limit of " + std::to_string(max_bytes) + " bytes per file");
    }
    data_bytes *= dims[d];
  }
  total_bytes += data_bytes;
  return {std::move(dims), total_bytes};
}

}  // namespace

IdxArray read_idx_u8(const std::string& path, int expected_num_dims, std::int64_t max_bytes) {
  ByteReader reader(path);
  std::array<std::uint8_t, 4> magic{};
  const std::int64_t got_magic = reader.read(magic.data(), 4);
  if (got_magic < 4) {
    fail(path, "truncated header: expected at least 4 bytes, got " + std::to_string(got_magic));
  }
  check_magic(path, magic, expected_num_dims);
  auto [dims, total_bytes] = read_dims(reader, expected_num_dims, max_bytes);
  const std::int64_t header_bytes = 4 + 4 * std::int64_t{expected_num_dims};
  IdxArray array{std::move(dims), {}};
  array.data.resize(static_cast<std::size_t>(total_bytes - header_bytes));
  const std::int64_t got = reader.read(array.data.data(), total_bytes - header_bytes);
  if (got < total_bytes - header_bytes) {
    fail(path, "truncated: expected " + std::to_string(total_bytes) + " bytes, got " +
                   std::to_string(header_bytes + got));
  }
  const std::int64_t extra = reader.skip_rest();
  if (extra > 0) {
    fail(path, "trailing garbage: " + std::to_string(extra) + " bytes after the expected " +
                   std::to_string(total_bytes));
  }
  reader.check_complete_stream();
  return array;
}

Dataset load_idx(const std::string& images_path, const std::string& labels_path, std::string name,
                 ChannelStats stats, int num_classes, std::int64_t max_file_bytes) {
  const IdxArray images = read_idx_u8(images_path, 3, max_file_bytes);
  const IdxArray labels = read_idx_u8(labels_path, 1, max_file_bytes);
  if (images.dims[1] > kMaxImageSide || images.dims[2] > kMaxImageSide) {
    fail(images_path, "image size " + std::to_string(images.dims[1]) + "x" +
                          std::to_string(images.dims[2]) + " above the limit of " +
                          std::to_string(kMaxImageSide) + " per side");
  }
  if (images.dims[0] != labels.dims[0]) {
    throw DataError("load of " + name + ": image count " + std::to_string(images.dims[0]) +
                    " (" + images_path + ") != label count " + std::to_string(labels.dims[0]) +
                    " (" + labels_path + ")");
  }
  Dataset dataset;
  dataset.name = std::move(name);
  dataset.num_samples = images.dims[0];
  dataset.channels = 1;
  dataset.height = static_cast<int>(images.dims[1]);
  dataset.width = static_cast<int>(images.dims[2]);
  dataset.num_classes = num_classes;
  dataset.normalization = {stats};
  dataset.labels.resize(labels.data.size());
  for (std::size_t i = 0; i < labels.data.size(); ++i) {
    if (labels.data[i] >= num_classes) {
      fail(labels_path, "sample " + std::to_string(i) + " is mislabelled: label " +
                            std::to_string(labels.data[i]) + " >= num_classes " +
                            std::to_string(num_classes));
    }
    dataset.labels[i] = labels.data[i];
  }
  const std::array<float, 256> table = pixel_table(stats);
  dataset.images.resize(images.data.size());
  for (std::size_t i = 0; i < images.data.size(); ++i) dataset.images[i] = table[images.data[i]];
  dataset.validate();
  return dataset;
}

}  // namespace pstrain::data
