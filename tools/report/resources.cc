#include "tools/report/resources.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include "common/base/errors.h"
#include "tools/report/json_text.h"

namespace pstrain::report {
namespace {

// The columns read, in the writer's order (common/observe/resource_sampler.h).
enum Column {
  kTime, kCpuUser, kCpuSystem, kCpuPercent, kRss, kSent, kReceived, kCollective, kGpuUtil, kGpuMem, kGpuPower,
  kNumColumns
};
constexpr std::array<const char*, kNumColumns> kColumnNames{
    "time_s",         "cpu_user_s",       "cpu_system_s",     "cpu_percent",        "rss_bytes",  "bytes_sent",
    "bytes_received", "collective_bytes", "gpu_util_percent", "gpu_mem_used_bytes", "gpu_power_w"};

std::vector<std::string> split_cells(const std::string& line) {
  std::vector<std::string> cells;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = line.find(',', start);
    cells.push_back(line.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) return cells;
    start = comma + 1;
  }
}

std::optional<double> parse_cell(const std::string& cell, const std::string& where, const char* column) {
  if (cell.empty()) return std::nullopt;
  char* end = nullptr;
  const double value = std::strtod(cell.c_str(), &end);
  if (end != cell.c_str() + cell.size() || !std::isfinite(value)) {
    throw DataError(where + ": column '" + column + "': '" + cell + "' is not a number");
  }
  return value;
}

// The largest of the values present.
void keep_max(std::optional<double>& peak, const std::optional<double>& value) {
  if (value && (!peak || *value > *peak)) peak = value;
}

struct Mean {
  double sum = 0;
  int count = 0;
  void add(const std::optional<double>& v) {
    if (v) sum += *v, ++count;
  }
  std::optional<double> value() const { return count > 0 ? std::optional(sum / count) : std::nullopt; }
};

int role_order(const std::string& role) { return role == "scheduler" ? 0 : role == "server" ? 1 : 2; }

// Byte counts are whole numbers: written as integers, not with 9 digits.
std::string json_count(const std::optional<double>& x) {
  return x ? json_number(static_cast<std::int64_t>(std::llround(*x))) : "null";
}

std::string gpu_json(const ResourceSummary& r) {
  if (!r.has_gpu()) return "null";
  return "{\"util_percent_mean\": " + json_number(r.gpu_util_percent_mean) +
         ", \"util_percent_peak\": " + json_number(r.gpu_util_percent_peak) +
         ", \"mem_used_peak_bytes\": " + json_count(r.gpu_mem_used_peak_bytes) +
         ", \"power_w_mean\": " + json_number(r.gpu_power_w_mean) + "}";
}

}  // namespace

ResourceSeries read_resource_csv(const std::filesystem::path& file, const std::string& role, int rank) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw DataError(file.string() + ": cannot read");
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  const std::string name = file.string();
  if (text.empty()) throw DataError(name + ": empty, expected the header line");

  ResourceSeries series{role, rank, {}};
  std::array<std::size_t, kNumColumns> index{};
  std::size_t num_cells = 0;
  std::size_t start = 0;
  for (int line_no = 1; start < text.size(); ++line_no) {
    const std::size_t newline = text.find('\n', start);
    if (newline == std::string::npos) break;  // a row cut short by the process's end
    const std::string line = text.substr(start, newline - start);
    start = newline + 1;
    const std::string where = name + ":" + std::to_string(line_no);
    const std::vector<std::string> cells = split_cells(line);
    if (line_no == 1) {
      for (std::size_t c = 0; c < kNumColumns; ++c) {
        const auto it = std::find(cells.begin(), cells.end(), kColumnNames[c]);
        if (it == cells.end()) throw DataError(where + ": header lacks column '" + kColumnNames[c] + "'");
        index[c] = static_cast<std::size_t>(it - cells.begin());
      }
      num_cells = cells.size();
      continue;
    }
    if (cells.size() != num_cells) {
      throw DataError(where + ": " + std::to_string(cells.size()) + " cells, the header has " +
                      std::to_string(num_cells));
    }
    auto cell = [&](Column c) { return parse_cell(cells[index[c]], where, kColumnNames[c]); };
    auto required = [&](Column c) {
      const std::optional<double> v = cell(c);
      if (!v) throw DataError(where + ": column '" + kColumnNames[c] + "' is empty");
      return *v;
    };
    ResourceSample s;
    s.time_s = required(kTime);
    s.cpu_user_s = required(kCpuUser);
    s.cpu_system_s = required(kCpuSystem);
    s.cpu_percent = cell(kCpuPercent);
    s.rss_bytes = cell(kRss);
    s.bytes_sent = cell(kSent);
    s.bytes_received = cell(kReceived);
    s.collective_bytes = cell(kCollective);
    s.gpu_util_percent = cell(kGpuUtil);
    s.gpu_mem_used_bytes = cell(kGpuMem);
    s.gpu_power_w = cell(kGpuPower);
    series.samples.push_back(s);
  }
  if (num_cells == 0) throw DataError(name + ":1: the header line is incomplete");
  return series;
}

std::vector<ResourceSeries> read_run_resources(const std::filesystem::path& run_dir,
                                               std::vector<std::string>& warnings) {
  std::vector<ResourceSeries> all;
  const std::filesystem::path dir = run_dir / "metrics";
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) return all;
  static const std::regex kName("resources-(scheduler|server|worker)-([0-9]{1,9})\\.csv");
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("resources-", 0) == 0 && name.size() > 4 && name.substr(name.size() - 4) == ".csv") {
      files.push_back(entry.path());
    }
  }
  std::sort(files.begin(), files.end());
  for (const std::filesystem::path& file : files) {
    std::smatch m;
    const std::string name = file.filename().string();
    if (!std::regex_match(name, m, kName)) {
      warnings.push_back(file.string() + ": not a resources-<scheduler|server|worker>-<rank>.csv name; left out");
      continue;
    }
    try {
      ResourceSeries s = read_resource_csv(file, m[1].str(), std::stoi(m[2].str()));
      if (s.samples.empty()) {
        warnings.push_back(file.string() + ": no samples; left out");
        continue;
      }
      all.push_back(std::move(s));
    } catch (const DataError& e) {
      warnings.push_back(std::string(e.what()) + "; resources of " + name + " left out");
    }
  }
  std::sort(all.begin(), all.end(), [](const ResourceSeries& a, const ResourceSeries& b) {
    return std::pair(role_order(a.role), a.rank) < std::pair(role_order(b.role), b.rank);
  });
  return all;
}

ResourceSummary summarize_resources(const ResourceSeries& series) {
  if (series.samples.empty()) {
    throw DataError("resources of " + series.role + " " + std::to_string(series.rank) + ": no samples");
  }
  const ResourceSample& first = series.samples.front();
  const ResourceSample& last = series.samples.back();
  ResourceSummary r;
  r.role = series.role;
  r.rank = series.rank;
  r.samples = static_cast<int>(series.samples.size());
  r.duration_s = last.time_s - first.time_s;
  r.cpu_s = last.cpu_user_s + last.cpu_system_s;
  Mean gpu_util, gpu_power;
  const ResourceSample* previous = nullptr;
  for (const ResourceSample& s : series.samples) {
    keep_max(r.cpu_percent_peak, s.cpu_percent);
    // Also each interval's share from the same columns the mean is taken
    // from, so the mean (their time-weighted average) is never above the
    // peak: the recorded percentages are rounded and timed by the sampler
    // itself, which on a run of a few tenths of a second can differ by more
    // than the CPU seconds' own resolution.
    if (previous != nullptr && s.time_s > previous->time_s) {
      const double cpu = (s.cpu_user_s + s.cpu_system_s) - (previous->cpu_user_s + previous->cpu_system_s);
      keep_max(r.cpu_percent_peak, std::optional<double>(100.0 * cpu / (s.time_s - previous->time_s)));
    }
    previous = &s;
    keep_max(r.rss_peak_bytes, s.rss_bytes);
    keep_max(r.gpu_util_percent_peak, s.gpu_util_percent);
    keep_max(r.gpu_mem_used_peak_bytes, s.gpu_mem_used_bytes);
    gpu_util.add(s.gpu_util_percent);
    gpu_power.add(s.gpu_power_w);
  }
  r.gpu_util_percent_mean = gpu_util.value();
  r.gpu_power_w_mean = gpu_power.value();
  if (series.samples.size() > 1 && r.duration_s > 0) {
    r.cpu_percent_mean = 100.0 * (r.cpu_s - first.cpu_user_s - first.cpu_system_s) / r.duration_s;
    if (first.bytes_sent && last.bytes_sent) r.send_bytes_per_s = (*last.bytes_sent - *first.bytes_sent) / r.duration_s;
    if (first.bytes_received && last.bytes_received) {
      r.receive_bytes_per_s = (*last.bytes_received - *first.bytes_received) / r.duration_s;
    }
  } else {
    r.cpu_percent_mean = first.cpu_percent;
  }
  r.bytes_sent = last.bytes_sent;
  r.bytes_received = last.bytes_received;
  r.collective_bytes = last.collective_bytes;
  return r;
}

std::string resource_summary_json(const ResourceSummary& r) {
  return "{\"role\": " + json_quote(r.role) + ", \"rank\": " + std::to_string(r.rank) +
         ", \"samples\": " + std::to_string(r.samples) + ", \"duration_s\": " + json_number(r.duration_s) +
         ", \"cpu_s\": " + json_number(r.cpu_s) + ", \"cpu_percent_mean\": " + json_number(r.cpu_percent_mean) +
         ", \"cpu_percent_peak\": " + json_number(r.cpu_percent_peak) +
         ", \"rss_peak_bytes\": " + json_count(r.rss_peak_bytes) + ", \"bytes_sent\": " + json_count(r.bytes_sent) +
         ", \"bytes_received\": " + json_count(r.bytes_received) +
         ", \"send_bytes_per_s\": " + json_number(r.send_bytes_per_s) +
         ", \"receive_bytes_per_s\": " + json_number(r.receive_bytes_per_s) +
         ", \"collective_bytes\": " + json_count(r.collective_bytes) + ", \"gpu\": " + gpu_json(r) + "}";
}

}  // namespace pstrain::report
