// The resource sampler: its CSV (header, rows at about the interval, a last
// row at stop, prompt stop), CPU time growing while a thread spins, RSS, the
// transport's byte counters over an inproc socket pair, and NVML: missing
// (empty GPU cells and one log line saying why) and a stand-in library with
// fixed readings (tests/common/fake_nvml.cpp).
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/base/errors.h"
#include "common/observe/nvml_gpu.h"
#include "common/observe/resource_sampler.h"
#include "common/transport/transport.h"
#include "common/transport/zmq/zmq_socket.h"
#include "tests/support/temp_dir.h"

using namespace pstrain;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

using pstrain::test::TempDir;  // tests/support/temp_dir.h

// Sets (or with null, unsets) an environment variable for one scope.
class EnvVar {
 public:
  EnvVar(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value != nullptr) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~EnvVar() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }
  EnvVar(const EnvVar&) = delete;
  EnvVar& operator=(const EnvVar&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// A Logger writing into a temporary file, and what it wrote.
class CapturedLog {
 public:
  CapturedLog() : file_(std::tmpfile()), log_("test", LogLevel::kInfo, file_, JobClock(JobClock::unix_now_us())) {}
  ~CapturedLog() { std::fclose(file_); }
  CapturedLog(const CapturedLog&) = delete;
  CapturedLog& operator=(const CapturedLog&) = delete;
  Logger& log() { return log_; }
  std::string text() {
    std::fflush(file_);
    std::rewind(file_);
    std::string out;
    char buf[512];
    while (std::fgets(buf, sizeof(buf), file_) != nullptr) out += buf;
    return out;
  }

 private:
  std::FILE* file_;
  Logger log_;
};

using Row = std::vector<std::string>;  // the cells of one CSV line

std::vector<std::string> read_lines(const fs::path& file) {
  std::ifstream in(file);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

Row split(const std::string& line) {
  Row cells;
  std::string cell;
  std::istringstream in(line);
  while (std::getline(in, cell, ',')) cells.push_back(cell);
  if (!line.empty() && line.back() == ',') cells.push_back("");
  return cells;
}

// The data rows, after checking the header.
std::vector<Row> read_rows(const fs::path& file) {
  const std::vector<std::string> lines = read_lines(file);
  REQUIRE(!lines.empty());
  CHECK(lines.front() == kResourceCsvHeader);
  std::vector<Row> rows;
  for (std::size_t i = 1; i < lines.size(); ++i) {
    rows.push_back(split(lines[i]));
    CAPTURE(lines[i]);
    REQUIRE(rows.back().size() == 11);
  }
  return rows;
}

enum Col { kTime, kUser, kSystem, kCpuPercent, kRss, kSent, kReceived, kCollective, kGpuUtil, kGpuMem, kGpuPower };

double num(const Row& r, Col c) {
  REQUIRE_FALSE(r[c].empty());
  return std::stod(r[c]);
}

ResourceSamplerOptions options_for(const fs::path& file, std::chrono::milliseconds interval) {
  ResourceSamplerOptions o;
  o.file = file;
  o.interval = interval;
  return o;
}

}  // namespace

// CPU seconds of this process by the other clock the kernel keeps.
double process_cpu_s() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

TEST_CASE("read_process_usage: CPU time grows while a thread spins; RSS is the process's") {
  const ProcessUsage before = read_process_usage();
  CHECK(before.rss_bytes > (std::int64_t{1} << 20));
  // Spin for 0.2 s of CPU time (not wall time: the machine may be busy).
  const double start = process_cpu_s();
  const auto give_up = std::chrono::steady_clock::now() + 10s;
  std::atomic<std::uint64_t> spins{0};
  while (process_cpu_s() - start < 0.2 && std::chrono::steady_clock::now() < give_up) {
    spins.fetch_add(1, std::memory_order_relaxed);
  }
  const ProcessUsage after = read_process_usage();
  const double grown = after.cpu_user_s + after.cpu_system_s - before.cpu_user_s - before.cpu_system_s;
  CHECK(grown > 0.18);
  CHECK(grown < process_cpu_s() - start + 0.05);
  CHECK(spins.load() > 0);
}

TEST_CASE("the sampler writes a row about every interval, a last one at stop, and reflects a spinning thread") {
  TempDir dir;
  const fs::path file = dir.path() / "metrics" / "resources-worker-0.csv";
  TrafficCounters traffic;
  CapturedLog log;
  ResourceSamplerOptions o = options_for(file, 50ms);
  o.traffic = &traffic;
  const JobClock clock(JobClock::unix_now_us());
  const double cpu_at_start = process_cpu_s();
  ResourceSampler sampler(o, clock, log.log());
  CHECK(read_lines(file) == std::vector<std::string>{kResourceCsvHeader});  // the header at once, flushed
  traffic.add_sent(1000);
  traffic.add_received(250);

  std::atomic<bool> spin{true};
  std::thread spinner([&] {
    std::uint64_t n = 0;
    while (spin.load(std::memory_order_relaxed)) ++n;
    CHECK(n > 0);
  });
  std::this_thread::sleep_for(520ms);
  const std::size_t rows_while_running = read_lines(file).size() - 1;  // rows are flushed as written
  spin = false;
  spinner.join();
  sampler.stop();
  sampler.stop();  // twice is fine
  const double cpu_at_end = process_cpu_s();

  // About 10 rows in 520 ms at 50 ms; a loaded machine may fall behind.
  CHECK(rows_while_running >= 5);
  CHECK(rows_while_running <= 11);
  const std::vector<Row> rows = read_rows(file);
  REQUIRE(rows.size() >= rows_while_running + 1);  // plus the last one
  CHECK(rows.size() <= rows_while_running + 2);
  double busiest = 0;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    CAPTURE(i);
    const Row& r = rows[i];
    CHECK(num(r, kRss) > 1e6);
    // The last row (at stop) may come under 10 ms after the one before: no CPU % then.
    const bool last_without_percent = i + 1 == rows.size() && r[kCpuPercent].empty();
    if (!last_without_percent) {
      CHECK(num(r, kCpuPercent) >= 0);
      busiest = std::max(busiest, num(r, kCpuPercent));
    }
    CHECK(num(r, kSent) == 1000);
    CHECK(num(r, kReceived) == 250);
    CHECK(r[kCollective].empty());  // not an allreduce worker
    CHECK(r[kGpuUtil].empty());
    CHECK(r[kGpuMem].empty());
    CHECK(r[kGpuPower].empty());
    if (i > 0) {
      CHECK(num(r, kTime) > num(rows[i - 1], kTime));
      CHECK(num(r, kUser) >= num(rows[i - 1], kUser));
      CHECK(num(r, kSystem) >= num(rows[i - 1], kSystem));
    }
  }
  CHECK(num(rows.front(), kTime) >= 0.04);  // job clock: the origin was the sampler's start
  CHECK(num(rows.front(), kTime) < 0.5);
  // One thread spinning: about 100 on an idle machine, 20 with five runnable
  // threads per core; an idle process: about 0.
  CHECK(busiest > 5);
  const double last_cpu = num(rows.back(), kUser) + num(rows.back(), kSystem);
  CHECK(last_cpu > num(rows.front(), kUser) + num(rows.front(), kSystem));
  CHECK(last_cpu > cpu_at_start);
  CHECK(last_cpu <= cpu_at_end + 0.01);
  const std::string text = log.text();
  CHECK(text.find("resource samples every 50 ms into " + file.string() + " (no GPU)") != std::string::npos);
}

TEST_CASE("stop does not wait for the interval; a short life still leaves one row") {
  TempDir dir;
  const fs::path file = dir.path() / "r.csv";
  CapturedLog log;
  const auto t0 = std::chrono::steady_clock::now();
  {
    ResourceSampler sampler(options_for(file, 60s), JobClock(JobClock::unix_now_us()), log.log());
    std::this_thread::sleep_for(20ms);
  }  // the destructor stops it
  CHECK(std::chrono::steady_clock::now() - t0 < 2s);
  const std::vector<Row> rows = read_rows(file);
  REQUIRE(rows.size() == 1);
  CHECK(rows[0][kSent].empty());  // no counters attached: empty byte cells
  CHECK(num(rows[0], kRss) > 1e6);
}

TEST_CASE("the transport's counters count header and payload bytes over an inproc pair") {
  zmq::context_t ctx;
  TrafficCounters a_traffic, b_traffic;
  zmq::socket_t a = make_socket(ctx, zmq::socket_type::pair);
  zmq::socket_t b = make_socket(ctx, zmq::socket_type::pair);
  bind_socket(a, "inproc://resource-test");
  connect_socket(b, "inproc://resource-test");
  const std::vector<float> data(1000, 1.5f);
  Header h;
  h.type = MsgType::kPush;
  h.role = Role::kWorker;
  h.key = 3;
  const std::size_t header_bytes = encode_header(h).size();
  send_message(a, nullptr, h, Payload::floats(data), &a_traffic);
  Header pull = h;
  pull.type = MsgType::kPull;
  send_message(a, nullptr, pull, {}, &a_traffic);
  send_message(a, nullptr, h, Payload::floats(data));  // no counters: not counted
  const std::uint64_t expected = 2 * header_bytes + data.size() * sizeof(float);
  CHECK(a_traffic.bytes_sent() == expected);
  CHECK(a_traffic.bytes_received() == 0);
  for (int i = 0; i < 2; ++i) REQUIRE(receive_message(b, false, 2000ms, DecodeLimits{}, nullptr, &b_traffic));
  CHECK(b_traffic.bytes_received() == expected);
  REQUIRE(receive_message(b, false, 2000ms, DecodeLimits{}));
  CHECK(b_traffic.bytes_received() == expected);
  CHECK(b_traffic.bytes_sent() == 0);

  send_error(b, nullptr, h, Role::kServer, 0, Status::kBadRequest, "no", &b_traffic);
  CHECK(b_traffic.bytes_sent() == header_bytes + 2);
  REQUIRE(receive_message(a, false, 2000ms, DecodeLimits{}, nullptr, &a_traffic));
  CHECK(a_traffic.bytes_received() == header_bytes + 2);
}

TEST_CASE("without NVML: open says why, the sampler logs it once and leaves the GPU cells empty") {
  std::string why;
  CHECK(NvmlGpu::open(0, &why, "libpstrain-no-such-nvml.so.1") == nullptr);
  CHECK(why.find("cannot load libpstrain-no-such-nvml.so.1") == 0);

  TempDir dir;
  CapturedLog log;
  ResourceSamplerOptions o = options_for(dir.path() / "r.csv", 20ms);
  o.cuda_device = 0;
  o.nvml_library = "libpstrain-no-such-nvml.so.1";
  ResourceSampler sampler(o, JobClock(JobClock::unix_now_us()), log.log());
  std::this_thread::sleep_for(70ms);
  sampler.stop();
  CHECK_FALSE(sampler.samples_gpu());
  CHECK(sampler.gpu_note().find("cannot load libpstrain-no-such-nvml.so.1") == 0);
  const std::string text = log.text();
  CHECK(text.find("no GPU samples for CUDA device 0: cannot load libpstrain-no-such-nvml.so.1") != std::string::npos);
  CHECK(text.find('\n') == text.size() - 1);  // one line
  const std::vector<Row> rows = read_rows(dir.path() / "r.csv");
  REQUIRE(rows.size() >= 2);
  for (const Row& r : rows) {
    CHECK(r[kGpuUtil].empty());
    CHECK(r[kGpuMem].empty());
    CHECK(r[kGpuPower].empty());
  }
}

TEST_CASE("NVML through a stand-in library: readings in the GPU cells, failures named") {
  EnvVar no_mask("CUDA_VISIBLE_DEVICES", nullptr);
  std::string why;
  auto gpu = NvmlGpu::open(0, &why, PSTRAIN_FAKE_NVML);
  REQUIRE_MESSAGE(gpu != nullptr, why);
  CHECK(gpu->description() == "NVML device 0 (CUDA device 0)");
  GpuSample s = gpu->sample(&why);
  CHECK(s.util_percent == 37);
  CHECK(s.mem_used_bytes == 1234567890.0);
  CHECK(s.power_w == doctest::Approx(71.5));

  auto second = NvmlGpu::open(1, &why, PSTRAIN_FAKE_NVML);
  REQUIRE(second != nullptr);
  why.clear();
  s = second->sample(&why);
  CHECK(s.util_percent == 37);
  CHECK_FALSE(s.power_w.has_value());  // not supported on that board: an empty cell, not a failure
  CHECK(why == "nvmlDeviceGetPowerUsage failed: Not Supported");

  CHECK(NvmlGpu::open(5, &why, PSTRAIN_FAKE_NVML) == nullptr);
  CHECK(why == "nvmlDeviceGetHandleByIndex_v2(5) failed: Invalid Argument");
  {
    EnvVar fail("FAKE_NVML_FAIL_INIT", "1");
    CHECK(NvmlGpu::open(0, &why, PSTRAIN_FAKE_NVML) == nullptr);
    CHECK(why == "nvmlInit_v2 failed: Driver Not Loaded");
  }
  {
    EnvVar mask("CUDA_VISIBLE_DEVICES", "1");  // CUDA device 0 is NVML device 1
    auto masked = NvmlGpu::open(0, &why, PSTRAIN_FAKE_NVML);
    REQUIRE(masked != nullptr);
    CHECK(masked->description() == "NVML device 1 (CUDA device 0)");
    CHECK(NvmlGpu::open(1, &why, PSTRAIN_FAKE_NVML) == nullptr);
    CHECK(why == "CUDA device 1 is not among CUDA_VISIBLE_DEVICES='1'");
  }

  TempDir dir;
  CapturedLog log;
  ResourceSamplerOptions o = options_for(dir.path() / "r.csv", 20ms);
  o.cuda_device = 0;
  o.nvml_library = PSTRAIN_FAKE_NVML;
  ResourceSampler sampler(o, JobClock(JobClock::unix_now_us()), log.log());
  std::this_thread::sleep_for(50ms);
  sampler.stop();
  CHECK(sampler.samples_gpu());
  CHECK(log.text().find("(GPU NVML device 0 (CUDA device 0))") != std::string::npos);
  const std::vector<Row> rows = read_rows(dir.path() / "r.csv");
  REQUIRE(!rows.empty());
  for (const Row& r : rows) {
    CHECK(r[kGpuUtil] == "37");
    CHECK(r[kGpuMem] == "1234567890");
    CHECK(r[kGpuPower] == "71.500");
  }
}

TEST_CASE("which NVML device a CUDA index is under CUDA_VISIBLE_DEVICES") {
  CHECK(NvmlGpu::nvml_device_for(2, nullptr) == "2");
  CHECK(NvmlGpu::nvml_device_for(0, "3,1") == "3");
  CHECK(NvmlGpu::nvml_device_for(1, "3, 1") == "1");
  CHECK(NvmlGpu::nvml_device_for(2, "3,1").empty());
  CHECK(NvmlGpu::nvml_device_for(0, "").empty());
  CHECK(NvmlGpu::nvml_device_for(1, "GPU-aa,GPU-bb") == "GPU-bb");
  CHECK(NvmlGpu::nvml_device_for(1, "0,-1,2").empty());  // CUDA stops at an invalid entry
  CHECK(NvmlGpu::nvml_device_for(-1, nullptr).empty());
}

TEST_CASE("start_resource_sampler: off at 0 ms, else RUN_DIR/metrics/resources-<role>-<rank>.csv") {
  TempDir dir;
  CapturedLog log;
  TrafficCounters traffic;
  OutputConfig output;
  output.run_dir = dir.path().string();
  output.resource_interval_ms = 0;
  CHECK(start_resource_sampler(output, "server", 1, &traffic, log.log()) == nullptr);
  CHECK_FALSE(fs::exists(dir.path() / "metrics"));
  output.resource_interval_ms = 30;
  auto sampler = start_resource_sampler(output, "server", 1, &traffic, log.log());
  REQUIRE(sampler != nullptr);
  CHECK(sampler->file() == dir.path() / "metrics" / "resources-server-1.csv");
  sampler->stop();
  CHECK(read_rows(sampler->file()).size() >= 1);
}

TEST_CASE("a sampler that cannot create its file says which") {
  TempDir dir;
  CapturedLog log;
  const fs::path blocker = dir.path() / "file";
  std::ofstream(blocker) << "x";
  try {
    ResourceSampler sampler(options_for(blocker / "r.csv", 50ms), JobClock(JobClock::unix_now_us()), log.log());
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("cannot create " + (blocker / "r.csv").string()) == 0);
  }
  CHECK_THROWS_AS(ResourceSampler(options_for(dir.path() / "r.csv", 0ms), JobClock(0), log.log()), ConfigError);
}
