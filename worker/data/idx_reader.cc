#include "worker/data/idx_reader.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <span>
#include <utility>

#include "common/base/errors.h"

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

// An open IDX file whose header has been read and checked; the data follow.
class IdxStream {
 public:
  IdxStream(const std::string& path, int expected_num_dims, std::int64_t max_bytes)
      : reader_(path), header_bytes_(4 + 4 * std::int64_t{expected_num_dims}) {
    std::array<std::uint8_t, 4> magic{};
    const std::int64_t got = reader_.read(magic.data(), 4);
    if (got < 4) {
      fail(path, "truncated header: expected at least 4 bytes, got " + std::to_string(got));
    }
    check_magic(path, magic, expected_num_dims);
    read_dims(expected_num_dims, max_bytes);
  }

  const std::vector<std::int64_t>& dims() const { return dims_; }
  std::int64_t data_bytes() const { return data_bytes_; }
  const std::string& path() const { return reader_.path(); }

  // Reads all the data, passing it in order to consume(chunk) in chunks of
  // at most kChunkBytes; then checks that the file ends right there.
  template <typename Consume>
  void read_data(Consume&& consume) {
    std::vector<std::uint8_t> chunk(static_cast<std::size_t>(std::min(kChunkBytes, data_bytes_)));
    for (std::int64_t done = 0; done < data_bytes_;) {
      const std::int64_t want = std::min(kChunkBytes, data_bytes_ - done);
      const std::int64_t got = reader_.read(chunk.data(), want);
      if (got < want) {
        fail(path(), "truncated: expected " + std::to_string(header_bytes_ + data_bytes_) +
                         " bytes, got " + std::to_string(header_bytes_ + done + got));
      }
      consume(std::span<const std::uint8_t>(chunk.data(), static_cast<std::size_t>(got)));
      done += got;
    }
    const std::int64_t extra = reader_.skip_rest();
    if (extra > 0) {
      fail(path(), "trailing garbage: " + std::to_string(extra) + " bytes after the expected " +
                       std::to_string(header_bytes_ + data_bytes_));
    }
    reader_.check_complete_stream();
  }

 private:
  static constexpr std::int64_t kChunkBytes = std::int64_t{1} << 18;

  // Reads the big-endian dims after the magic number and checks the data
  // size (header included) against max_bytes.
  void read_dims(int num_dims, std::int64_t max_bytes) {
    std::vector<std::uint8_t> raw(static_cast<std::size_t>(4 * num_dims));
    const std::int64_t got = reader_.read(raw.data(), static_cast<std::int64_t>(raw.size()));
    if (got < static_cast<std::int64_t>(raw.size())) {
      fail(path(), "truncated header: expected " + std::to_string(header_bytes_) + " bytes, got " +
                       std::to_string(4 + got));
    }
    for (int d = 0; d < num_dims; ++d) dims_.push_back(big_endian_u32(raw.data() + 4 * d));
    data_bytes_ = 1;
    for (std::size_t d = 0; d < dims_.size(); ++d) {
      if (dims_[d] == 0) fail(path(), "dim " + std::to_string(d) + " is 0");
      if (data_bytes_ > (max_bytes - header_bytes_) / dims_[d]) {
        fail(path(), "header declares " + dims_text(dims_) + " bytes of data, more than the " +
                         "limit of " + std::to_string(max_bytes) + " bytes per file");
      }
      data_bytes_ *= dims_[d];
    }
  }

  ByteReader reader_;
  std::int64_t header_bytes_;
  std::vector<std::int64_t> dims_;
  std::int64_t data_bytes_ = 0;
};

}  // namespace

IdxArray read_idx_u8(const std::string& path, int expected_num_dims, std::int64_t max_bytes) {
  IdxStream stream(path, expected_num_dims, max_bytes);
  IdxArray array{stream.dims(), {}};
  array.data.reserve(static_cast<std::size_t>(stream.data_bytes()));
  stream.read_data([&](std::span<const std::uint8_t> chunk) {
    array.data.insert(array.data.end(), chunk.begin(), chunk.end());
  });
  return array;
}

Dataset load_idx(const std::string& images_path, const std::string& labels_path, std::string name,
                 ChannelStats stats, int num_classes, std::int64_t max_file_bytes) {
  IdxStream images(images_path, 3, max_file_bytes);
  const IdxArray labels = read_idx_u8(labels_path, 1, max_file_bytes);
  const std::vector<std::int64_t>& dims = images.dims();
  if (dims[1] > kMaxImageSide || dims[2] > kMaxImageSide) {
    fail(images_path, "image size " + std::to_string(dims[1]) + "x" + std::to_string(dims[2]) +
                          " above the limit of " + std::to_string(kMaxImageSide) + " per side");
  }
  if (dims[0] != labels.dims[0]) {
    throw DataError("load of " + name + ": image count " + std::to_string(dims[0]) + " (" +
                    images_path + ") != label count " + std::to_string(labels.dims[0]) + " (" +
                    labels_path + ")");
  }
  Dataset dataset;
  dataset.name = std::move(name);
  dataset.num_samples = dims[0];
  dataset.channels = 1;
  dataset.height = static_cast<int>(dims[1]);
  dataset.width = static_cast<int>(dims[2]);
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
  dataset.images.resize(static_cast<std::size_t>(images.data_bytes()));
  float* out = dataset.images.data();
  images.read_data([&](std::span<const std::uint8_t> chunk) {
    for (const std::uint8_t pixel : chunk) *out++ = table[pixel];
  });
  dataset.validate();
  return dataset;
}

}  // namespace pstrain::data
