// Sequential reading of a data file that is either gzip-compressed or plain.
//
// The format is detected from the content (gzip magic bytes 1f 8b), never
// from the file name. Byte counts are always of the decompressed content.
// Every failure throws DataError naming the file: missing, not a regular
// file, cannot be opened, read error, corrupt gzip stream.
//
// A ByteReader owns its open file (closed by the destructor); it is movable,
// not copyable, and not thread-safe.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <zlib.h>

namespace pstrain::data {

// Upper bound on the decompressed size of one data file (1 GiB); readers
// check sizes against it before allocating.
inline constexpr std::int64_t kDefaultMaxFileBytes = std::int64_t{1} << 30;

class ByteReader {
 public:
  explicit ByteReader(std::string path);
  ~ByteReader();
  ByteReader(ByteReader&& other) noexcept;
  ByteReader& operator=(ByteReader&& other) noexcept;
  ByteReader(const ByteReader&) = delete;
  ByteReader& operator=(const ByteReader&) = delete;

  // Reads up to num_bytes into dst and returns how many were read; fewer
  // than num_bytes only when the data ends.
  std::int64_t read(void* dst, std::int64_t num_bytes);

  // Reads and discards the rest of the data; returns how many bytes it had.
  std::int64_t skip_rest();

  // Call once read() has returned short: throws DataError when a gzip stream
  // ended before its end marker and checksum (the file was cut short).
  void check_complete_stream();

  bool compressed() const { return gz_ != nullptr; }
  const std::string& path() const { return path_; }

 private:
  void close() noexcept;
  std::int64_t read_chunk(void* dst, unsigned num_bytes);

  std::string path_;
  std::FILE* file_ = nullptr;  // plain file, or
  gzFile gz_ = nullptr;        // gzip file
};

// The whole decompressed content of `path`. Throws DataError when it holds
// more than max_bytes (checked while reading, before growing the buffer).
std::vector<std::uint8_t> read_all(const std::string& path,
                                   std::int64_t max_bytes = kDefaultMaxFileBytes);

}  // namespace pstrain::data
