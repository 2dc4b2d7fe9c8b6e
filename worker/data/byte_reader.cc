#include "worker/data/byte_reader.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include "common/base/errors.h"

namespace pstrain::data {

namespace {

constexpr unsigned kMaxChunkBytes = 1u << 30;    // gzread takes an unsigned length
constexpr unsigned kGzBufferBytes = 1u << 18;    // zlib's input buffer: fewer syscalls

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw DataError("read of " + path + ": " + what);
}

// True when the file starts with the gzip magic bytes 1f 8b.
// zlib's error text without the "PATH: " prefix gzerror puts before it.
std::string zlib_error(gzFile gz, const std::string& path, int* zlib_code) {
  std::string message = gzerror(gz, zlib_code);
  const std::string prefix = path + ": ";
  if (message.starts_with(prefix)) message.erase(0, prefix.size());
  return message;
}

bool starts_with_gzip_magic(std::FILE* file) {
  std::array<unsigned char, 2> magic{};
  const std::size_t got = std::fread(magic.data(), 1, magic.size(), file);
  std::rewind(file);
  return got == magic.size() && magic[0] == 0x1f && magic[1] == 0x8b;
}

}  // namespace

ByteReader::ByteReader(std::string path) : path_(std::move(path)) {
  std::error_code ec;
  const auto status = std::filesystem::status(path_, ec);
  if (!std::filesystem::exists(status)) fail(path_, "file not found");
  if (!std::filesystem::is_regular_file(status)) fail(path_, "not a regular file");
  file_ = std::fopen(path_.c_str(), "rb");
  if (file_ == nullptr) fail(path_, std::string("cannot open: ") + std::strerror(errno));
  if (!starts_with_gzip_magic(file_)) return;
  std::fclose(file_);
  file_ = nullptr;
  gz_ = gzopen(path_.c_str(), "rb");
  if (gz_ == nullptr) fail(path_, std::string("cannot open gzip file: ") + std::strerror(errno));
  gzbuffer(gz_, kGzBufferBytes);
}

ByteReader::~ByteReader() { close(); }

ByteReader::ByteReader(ByteReader&& other) noexcept
    : path_(std::move(other.path_)),
      file_(std::exchange(other.file_, nullptr)),
      gz_(std::exchange(other.gz_, nullptr)) {}

ByteReader& ByteReader::operator=(ByteReader&& other) noexcept {
  if (this != &other) {
    close();
    path_ = std::move(other.path_);
    file_ = std::exchange(other.file_, nullptr);
    gz_ = std::exchange(other.gz_, nullptr);
  }
  return *this;
}

void ByteReader::close() noexcept {
  if (file_ != nullptr) std::fclose(file_);
  if (gz_ != nullptr) gzclose(gz_);
  file_ = nullptr;
  gz_ = nullptr;
}

std::int64_t ByteReader::read_chunk(void* dst, unsigned num_bytes) {
  if (file_ != nullptr) {
    const std::size_t got = std::fread(dst, 1, num_bytes, file_);
    if (got < num_bytes && std::ferror(file_)) {
      fail(path_, std::string("read error: ") + std::strerror(errno));
    }
    return static_cast<std::int64_t>(got);
  }
  const int got = gzread(gz_, dst, num_bytes);
  int zlib_code = Z_OK;
  const std::string zlib_message = zlib_error(gz_, path_, &zlib_code);
  // A stream cut short reads as Z_BUF_ERROR: the caller reports it as truncated.
  if (got < 0 || (zlib_code != Z_OK && zlib_code != Z_BUF_ERROR)) {
    fail(path_, "corrupt gzip data: " + zlib_message);
  }
  return got;
}

std::int64_t ByteReader::read(void* dst, std::int64_t num_bytes) {
  auto* out = static_cast<unsigned char*>(dst);
  std::int64_t total = 0;
  while (total < num_bytes) {
    const auto want = static_cast<unsigned>(std::min<std::int64_t>(num_bytes - total, kMaxChunkBytes));
    const std::int64_t got = read_chunk(out + total, want);
    total += got;
    if (got < want) break;
  }
  return total;
}

std::int64_t ByteReader::skip_rest() {
  std::array<unsigned char, 1 << 16> scratch{};
  std::int64_t total = 0;
  for (;;) {
    const std::int64_t got = read(scratch.data(), static_cast<std::int64_t>(scratch.size()));
    total += got;
    if (got < static_cast<std::int64_t>(scratch.size())) return total;
  }
}

void ByteReader::check_complete_stream() {
  if (gz_ == nullptr) return;
  int zlib_code = Z_OK;
  const std::string zlib_message = zlib_error(gz_, path_, &zlib_code);
  if (zlib_code != Z_OK) fail(path_, "truncated gzip stream: " + zlib_message);
}

std::vector<std::uint8_t> read_all(const std::string& path, std::int64_t max_bytes) {
  ByteReader reader(path);
  constexpr std::int64_t kStepBytes = std::int64_t{1} << 22;
  std::vector<std::uint8_t> bytes;
  std::int64_t size = 0;
  for (;;) {
    const std::int64_t want = std::min(kStepBytes, max_bytes + 1 - size);
    if (want <= 0) break;
    bytes.resize(static_cast<std::size_t>(size + want));
    const std::int64_t got = reader.read(bytes.data() + size, want);
    size += got;
    if (got < want) break;
  }
  if (size > max_bytes) {
    fail(path, "larger than the limit of " + std::to_string(max_bytes) + " bytes");
  }
  reader.check_complete_stream();
  bytes.resize(static_cast<std::size_t>(size));
  return bytes;
}

}  // namespace pstrain::data
