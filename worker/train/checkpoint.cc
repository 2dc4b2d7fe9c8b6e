#include "worker/train/checkpoint.h"

#include <cmath>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>

#include "common/base/errors.h"
#include "common/checkpoint/npz.h"
#include "worker/train/metrics.h"

namespace pstrain {
namespace {

constexpr char kMagic[4] = {'P', 'S', 'W', 'T'};
constexpr std::uint32_t kVersion = 1;
constexpr std::size_t kHeaderBytes = 16;

}  // namespace

std::string weights_path(const std::string& run_dir) { return run_dir + "/weights.bin"; }

void write_final_weights(const std::string& run_dir, std::span<const float> params) {
  if (run_dir.empty()) return;
  std::size_t bad = 0;
  for (const float x : params) bad += std::isfinite(x) ? 0 : 1;
  if (bad > 0) {
    throw DivergedError("the final weights have " + std::to_string(bad) + " non-finite values of " +
                        std::to_string(params.size()) + ": training diverged; not written to " + weights_path(run_dir) +
                        " (lower optimizer.lr, or lengthen schedule.warmup_epochs)");
  }
  make_directories(run_dir);
  const std::string path = weights_path(run_dir);
  const std::string tmp = path + ".tmp";
  char header[kHeaderBytes];
  const std::uint64_t count = params.size();
  std::memcpy(header, kMagic, 4);
  std::memcpy(header + 4, &kVersion, 4);
  std::memcpy(header + 8, &count, 8);
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) throw Error("cannot write " + tmp + ": " + std::strerror(errno));
  const bool ok = std::fwrite(header, 1, kHeaderBytes, f) == kHeaderBytes &&
                  std::fwrite(params.data(), sizeof(float), params.size(), f) == params.size();
  if (std::fclose(f) != 0 || !ok) throw Error("cannot write " + tmp + ": " + std::strerror(errno));
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    throw Error("cannot rename " + tmp + " to " + path + ": " + std::strerror(errno));
  }
}

std::string weights_npz_path(const std::string& run_dir) { return run_dir + "/weights.npz"; }

void write_final_weights(const std::string& run_dir, const ParamLayout& layout, std::span<const float> params) {
  write_final_weights(run_dir, params);  // checks the values are finite first
  if (!run_dir.empty()) write_npz(weights_npz_path(run_dir), layout, params);
}

std::vector<float> read_weights(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw DataError("cannot read " + path + ": no such file or not readable");
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() < kHeaderBytes) {
    throw DataError(path + ": " + std::to_string(bytes.size()) + " bytes, shorter than the " +
                    std::to_string(kHeaderBytes) + "-byte header");
  }
  if (std::memcmp(bytes.data(), kMagic, 4) != 0) throw DataError(path + ": bad magic, not a pstrain weights file");
  std::uint32_t version = 0;
  std::uint64_t count = 0;
  std::memcpy(&version, bytes.data() + 4, 4);
  std::memcpy(&count, bytes.data() + 8, 8);
  if (version != kVersion) {
    throw DataError(path + ": format version " + std::to_string(version) + ", expected " + std::to_string(kVersion));
  }
  const std::uint64_t body = bytes.size() - kHeaderBytes;
  if (body % sizeof(float) != 0 || body / sizeof(float) != count) {
    throw DataError(path + ": header says " + std::to_string(count) + " parameters (" +
                    std::to_string(count * sizeof(float)) + " bytes), the file holds " + std::to_string(body) +
                    " bytes after the header");
  }
  std::vector<float> params(count);
  std::memcpy(params.data(), bytes.data() + kHeaderBytes, body);
  return params;
}

}  // namespace pstrain
