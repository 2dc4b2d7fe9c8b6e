#include "common/observe/resource_sampler.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "common/base/errors.h"

namespace pstrain {
namespace {

// A shorter span (a last row right after the previous one) says nothing
// about CPU use: the kernel's split into user and system time is coarse.
constexpr double kMinCpuPercentSpan_s = 0.01;

double seconds_of(const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6; }

// Appends "," and the number (printf `format`) or just "," for an empty cell.
void cell(std::string& row, const char* format, std::optional<double> value) {
  row += ',';
  if (!value) return;
  char buf[48];
  std::snprintf(buf, sizeof(buf), format, *value);
  row += buf;
}

void cell(std::string& row, std::optional<std::uint64_t> value) {
  row += ',';
  if (value) row += std::to_string(*value);
}

}  // namespace

ProcessUsage read_process_usage() {
  ProcessUsage u;
  rusage r{};
  if (getrusage(RUSAGE_SELF, &r) == 0) {
    u.cpu_user_s = seconds_of(r.ru_utime);
    u.cpu_system_s = seconds_of(r.ru_stime);
  }
  // statm: size resident shared text lib data dt, in pages.
  std::ifstream statm("/proc/self/statm");
  long long size_pages = 0, resident_pages = 0;
  if (statm >> size_pages >> resident_pages) {
    u.rss_bytes = static_cast<std::int64_t>(resident_pages) * static_cast<std::int64_t>(sysconf(_SC_PAGESIZE));
  }
  return u;
}

std::filesystem::path resource_csv_path(const std::filesystem::path& run_dir, std::string_view role, int rank) {
  return run_dir / "metrics" / ("resources-" + std::string(role) + "-" + std::to_string(rank) + ".csv");
}

ResourceSampler::ResourceSampler(ResourceSamplerOptions options, JobClock clock, Logger& log)
    : options_(std::move(options)), clock_(clock), log_(log) {
  if (options_.interval.count() <= 0) {
    throw ConfigError("resource sampler: the interval must be positive, got " +
                      std::to_string(options_.interval.count()) + " ms");
  }
  std::error_code ec;
  if (options_.file.has_parent_path()) std::filesystem::create_directories(options_.file.parent_path(), ec);
  out_ = std::fopen(options_.file.c_str(), "w");
  if (out_ == nullptr) throw Error("cannot create " + options_.file.string() + ": " + std::strerror(errno));
  std::fprintf(out_, "%s\n", kResourceCsvHeader);
  std::fflush(out_);

  std::string gpu = "no GPU";
  if (options_.cuda_device >= 0) {
    gpu_ = NvmlGpu::open(options_.cuda_device, &gpu_note_, options_.nvml_library);
    gpu = gpu_ ? "GPU " + gpu_->description()
               : "no GPU samples for CUDA device " + std::to_string(options_.cuda_device) + ": " + gpu_note_;
  }
  log_.info("resource samples every " + std::to_string(options_.interval.count()) + " ms into " +
            options_.file.string() + " (" + gpu + ")");

  last_time_ = Steady::now();
  const ProcessUsage u = read_process_usage();
  last_cpu_s_ = u.cpu_user_s + u.cpu_system_s;
  thread_ = std::thread([this] { loop(); });
}

ResourceSampler::~ResourceSampler() {
  try {
    stop();
  } catch (...) {
    // A destructor reports nothing; stop() itself only logs.
  }
}

void ResourceSampler::stop() {
  {
    std::lock_guard lock(mutex_);
    if (stopped_) return;
    stopped_ = true;
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  write_row();  // the last row, after the thread's
  if (out_ != nullptr) std::fclose(out_);
  out_ = nullptr;
}

void ResourceSampler::loop() {
  auto next = Steady::now() + options_.interval;
  std::unique_lock lock(mutex_);
  while (true) {
    if (wake_.wait_until(lock, next, [this] { return stop_; })) return;
    lock.unlock();
    write_row();
    lock.lock();
    // One interval after this row (not a fixed grid: a late wake-up must not
    // make the next row come early, too soon to measure CPU use over).
    next = Steady::now() + options_.interval;
  }
}

void ResourceSampler::write_row() {
  if (out_ == nullptr || write_failed_) return;
  const ProcessUsage u = read_process_usage();
  const auto now = Steady::now();
  const double cpu_s = u.cpu_user_s + u.cpu_system_s;
  const double wall_s = std::chrono::duration<double>(now - last_time_).count();
  std::optional<double> cpu_percent;
  if (wall_s >= kMinCpuPercentSpan_s) cpu_percent = 100.0 * (cpu_s - last_cpu_s_) / wall_s;
  last_time_ = now;
  last_cpu_s_ = cpu_s;

  char time_buf[32];
  // Microseconds: a last row can follow the previous one within a millisecond.
  std::snprintf(time_buf, sizeof(time_buf), "%.6f", clock_.now_s());
  std::string row = time_buf;
  cell(row, "%.4f", u.cpu_user_s);
  cell(row, "%.4f", u.cpu_system_s);
  cell(row, "%.1f", cpu_percent);
  cell(row, u.rss_bytes >= 0 ? std::optional<std::uint64_t>(static_cast<std::uint64_t>(u.rss_bytes)) : std::nullopt);
  const TrafficCounters* t = options_.traffic;
  cell(row, t != nullptr ? std::optional(t->bytes_sent()) : std::nullopt);
  cell(row, t != nullptr ? std::optional(t->bytes_received()) : std::nullopt);
  cell(row, t != nullptr && options_.collective ? std::optional(t->collective_bytes()) : std::nullopt);
  GpuSample g;
  if (gpu_) g = gpu_->sample();
  cell(row, "%.0f", g.util_percent);
  cell(row, "%.0f", g.mem_used_bytes);
  cell(row, "%.3f", g.power_w);
  row += '\n';
  if (std::fputs(row.c_str(), out_) < 0 || std::fflush(out_) != 0) {
    write_failed_ = true;  // e.g. a full disk: say so once, keep the process running
    log_.warn("cannot write " + options_.file.string() + ": " + std::strerror(errno) + "; resource sampling stopped");
  }
}

std::unique_ptr<ResourceSampler> start_resource_sampler(const OutputConfig& output, std::string_view role, int rank,
                                                        const TrafficCounters* traffic, Logger& log, int cuda_device,
                                                        bool collective) {
  if (output.resource_interval_ms <= 0 || output.run_dir.empty()) return nullptr;
  ResourceSamplerOptions o;
  o.file = resource_csv_path(output.run_dir, role, rank);
  o.interval = std::chrono::milliseconds(output.resource_interval_ms);
  o.traffic = traffic;
  o.collective = collective;
  o.cuda_device = cuda_device;
  return std::make_unique<ResourceSampler>(std::move(o), log.clock(), log);
}

}  // namespace pstrain
