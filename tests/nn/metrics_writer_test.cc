// MetricsWriter on a full disk: the first failed write is said once, on the
// node's log, and nothing more is written (no file with holes).
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "worker/train/metrics.h"
#include "tests/support/temp_dir.h"

namespace pstrain {
namespace {

namespace fs = std::filesystem;

std::string read_all(std::FILE* f) {
  std::rewind(f);
  std::string out;
  char buf[512];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) out.append(buf, n);
  return out;
}

}  // namespace

TEST_CASE("a metrics file that cannot be written is reported once as incomplete, and not written to again") {
  const pstrain::test::TempDir dir("metrics");
  const fs::path& run = dir.path();
  fs::create_directories(run / "metrics");
  fs::create_symlink("/dev/full", run / "metrics" / "worker-0.jsonl");  // ENOSPC on every write

  std::FILE* log_out = std::tmpfile();
  REQUIRE(log_out != nullptr);
  Logger log("worker 0", LogLevel::kInfo, log_out, JobClock(1));
  MetricsWriter metrics(run.string(), "worker-0.jsonl");
  metrics.set_log(&log);
  CHECK_FALSE(metrics.incomplete());
  for (int step = 0; step < 3; ++step) metrics.write(JsonLine().add("type", "step").add("step", step));
  CHECK(metrics.incomplete());
  const std::string logged = read_all(log_out);
  const std::string expected = "worker 0] warning: cannot write " + (run / "metrics" / "worker-0.jsonl").string() +
                               ": No space left on device; the metrics are incomplete from here on";
  CHECK(logged.find(expected) != std::string::npos);
  CHECK(logged.find("cannot write", logged.find(expected) + expected.size()) == std::string::npos);  // said once
  std::fclose(log_out);
}

TEST_CASE("a metrics file that can be written holds every record, one per line") {
  const pstrain::test::TempDir dir("metrics");
  const fs::path& run = dir.path();
  {
    MetricsWriter metrics(run.string(), "worker-1.jsonl");
    for (int step = 0; step < 3; ++step) metrics.write(JsonLine().add("type", "step").add("step", step));
    CHECK_FALSE(metrics.incomplete());
  }
  std::ifstream in(run / "metrics" / "worker-1.jsonl");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(text == "{\"type\":\"step\",\"step\":0}\n{\"type\":\"step\",\"step\":1}\n{\"type\":\"step\",\"step\":2}\n");
}

}  // namespace pstrain
