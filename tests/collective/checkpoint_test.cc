// weights.bin: written and read back, and every malformed file refused.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "common/base/errors.h"
#include "common/checkpoint/checkpoint.h"
#include "worker/train/checkpoint.h"
#include "worker/train/worker_checkpoint.h"
#include "tests/support/temp_dir.h"

namespace pstrain {
namespace {

namespace fs = std::filesystem;

using pstrain::test::TempDir;

std::string bytes_of(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_bytes(const fs::path& file, const std::string& bytes) { std::ofstream(file, std::ios::binary) << bytes; }

}  // namespace

TEST_CASE("final weights round trip through run_dir/weights.bin") {
  TempDir dir;
  const std::vector<float> params{1.5f, -2.0f, 0.0f, 3.25e-7f};
  write_final_weights((dir.path() / "run").string(), params);
  const std::string path = weights_path((dir.path() / "run").string());
  CHECK(path == (dir.path() / "run" / "weights.bin").string());
  CHECK(read_weights(path) == params);
  CHECK(bytes_of(path).size() == 16 + 4 * 4);
  CHECK_FALSE(fs::exists(path + ".tmp"));
  write_final_weights("", params);  // no run directory: nothing written, no error
}

TEST_CASE("malformed weight files are refused naming the file and the problem") {
  TempDir dir;
  const std::string path = (dir.path() / "weights.bin").string();
  CHECK_THROWS_WITH_AS(read_weights(path), doctest::Contains(("cannot read " + path).c_str()), DataError);
  write_final_weights(dir.path().string(), std::vector<float>{1, 2, 3});
  const std::string good = bytes_of(path);

  write_bytes(path, good.substr(0, 10));
  CHECK_THROWS_WITH_AS(read_weights(path), (path + ": 10 bytes, shorter than the 16-byte header").c_str(), DataError);
  write_bytes(path, "XXXX" + good.substr(4));
  CHECK_THROWS_WITH_AS(read_weights(path), (path + ": bad magic, not a pstrain weights file").c_str(), DataError);
  std::string v2 = good;
  v2[4] = 2;
  write_bytes(path, v2);
  CHECK_THROWS_WITH_AS(read_weights(path), (path + ": format version 2, expected 1").c_str(), DataError);
  write_bytes(path, good.substr(0, good.size() - 4));
  CHECK_THROWS_WITH_AS(read_weights(path),
                       (path + ": header says 3 parameters (12 bytes), the file holds 8 bytes after the header").c_str(),
                       DataError);
  write_bytes(path, good + "ab");
  CHECK_THROWS_WITH_AS(read_weights(path),
                       (path + ": header says 3 parameters (12 bytes), the file holds 14 bytes after the header").c_str(),
                       DataError);
}


TEST_CASE("a checkpoint whose server part will never come (the server failed) is abandoned at once, without a manifest") {
  TempDir dir;
  RunConfig config;
  config.output.run_dir = dir.path().string();
  config.checkpoint.interval_steps = 4;
  config.cluster.num_workers = 1;
  config.cluster.timeout_ms = 60000;
  WorkerCheckpoint state;
  state.step = 4;
  write_worker_part(config, 0, state);
  int asked = 0;
  bool abandoned = false;
  const auto start = std::chrono::steady_clock::now();
  const std::string line = complete_checkpoint(config, 4, 10, 1, [&] { return ++asked >= 3; }, &abandoned);
  CHECK(abandoned);
  CHECK(asked == 3);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));  // not timeout_ms
  CHECK(line.find("abandoned: a server failed before writing its part") != std::string::npos);
  CHECK_FALSE(fs::exists(checkpoint_root(config) / checkpoint_dir_name(4) / "manifest.json"));
  // Without a failure, a missing server part is still an error after timeout_ms.
  config.cluster.timeout_ms = 50;
  CHECK_THROWS_AS(complete_checkpoint(config, 4, 10, 1, [] { return false; }), CheckpointError);
}

}  // namespace pstrain
