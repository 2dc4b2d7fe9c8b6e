// Shared by the fault sweeps (tests/integration/sweep_*_test.cc): one job
// through the launcher with a fault applied to one node mid-run, and the
// checks of what the user reads afterwards (exit code, summary.json, the
// metrics records) and that no process of the job is left behind.
#pragma once

#include <doctest/doctest.h>

#include <dirent.h>

#include <cstdint>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/integration/launch_test_util.h"
#include "tests/integration/summary_checks.h"
#include "tools/report/json_value.h"

namespace sweep {

using pstrain::report::JsonValue;
namespace fs = std::filesystem;

constexpr std::int64_t kTrainSamples = 1024;  // configs/tiny_*.toml: synthetic_train
constexpr std::int64_t kBatch = 32;           // configs/tiny_*.toml: batch_size

inline std::vector<JsonValue> json_lines(const fs::path& file) {
  std::vector<JsonValue> lines;
  std::istringstream in(it::read_file(file));
  for (std::string line; std::getline(in, line);) {
    // A process killed mid-write may leave its last line cut: that one is not a record.
    if (line.empty() || line.back() != '}') continue;
    lines.push_back(pstrain::report::parse_json(line, file.string()));
  }
  return lines;
}

inline std::string type_of(const JsonValue& v) { return v.find("type")->as_string("type"); }

inline std::int64_t integer(const JsonValue& v, const char* key) {
  const JsonValue* x = v.find(key);
  REQUIRE_MESSAGE(x != nullptr, "no key " << key);
  return x->as_integer(key);
}

inline int step_records(const fs::path& file) {
  const std::string text = it::read_file(file);
  int n = 0;
  for (auto at = text.find("\"type\":\"step\""); at != std::string::npos; at = text.find("\"type\":\"step\"", at + 1)) ++n;
  return n;
}

inline fs::path worker_metrics(const fs::path& run, int rank) {
  return run / "metrics" / ("worker-" + std::to_string(rank) + ".jsonl");
}

// Every process whose command line names `run` (the launcher starts each node
// with --config RUN/config.toml): what a job left behind once its launcher exited.
inline std::vector<std::string> processes_of(const fs::path& run) {
  std::vector<std::string> found;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return found;
  const std::string needle = run.string() + "/";
  for (dirent* e = readdir(proc); e != nullptr; e = readdir(proc)) {
    const std::string name = e->d_name;
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmdline = it::read_file(fs::path("/proc") / name / "cmdline");
    for (char& c : cmdline) c = c == '\0' ? ' ' : c;
    if (it::contains(cmdline, needle)) {
      // A zombie not yet reaped by its (exiting) parent is gone for our purpose; a stopped one is not.
      const std::string stat = it::read_file(fs::path("/proc") / name / "stat");
      const auto close = stat.rfind(')');
      if (close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'Z') continue;
      found.push_back(name + ": " + cmdline);
    }
  }
  closedir(proc);
  return found;
}

// After the launcher exited: every pid it recorded, and `extra` (a victim),
// is gone, and no process names the run directory.
inline void check_nothing_left(const fs::path& run, const std::vector<pid_t>& extra = {}) {
  for (const auto& [name, pid] : it::read_pids(run)) {
    CAPTURE(name);
    CHECK(it::wait_until([&] { return it::process_gone(pid); }, std::chrono::seconds(30), name + " to be gone"));
  }
  for (const pid_t pid : extra) {
    CAPTURE(pid);
    CHECK(it::wait_until([&] { return it::process_gone(pid); }, std::chrono::seconds(30), "the victim to be gone"));
  }
  std::vector<std::string> left;
  it::wait_until([&] { return (left = processes_of(run)).empty(); }, std::chrono::seconds(30),
                 "no process naming the run directory");
  std::string text;
  for (const std::string& p : left) text += p + "\n";
  CAPTURE(text);
  CHECK(left.empty());
}

// Per epoch, the images every worker's step records of it add up to (a
// restarted rank's file holds its predecessors' records too).
inline std::map<std::int64_t, std::int64_t> samples_per_epoch(const fs::path& run, int workers) {
  std::map<std::int64_t, std::int64_t> samples;
  for (int w = 0; w < workers; ++w) {
    for (const JsonValue& line : json_lines(worker_metrics(run, w))) {
      if (type_of(line) == "step") samples[integer(line, "epoch")] += integer(line, "batch");
    }
  }
  return samples;
}

// The images of rank `w`'s step records.
inline std::int64_t images_recorded(const fs::path& run, int w) {
  std::int64_t images = 0;
  for (const JsonValue& line : json_lines(worker_metrics(run, w))) {
    if (type_of(line) == "step") images += integer(line, "batch");
  }
  return images;
}

// The servers' counts summed: metrics/server-R.json's `key`.
inline std::int64_t server_total(const fs::path& run, int servers, const char* key) {
  std::int64_t total = 0;
  for (int s = 0; s < servers; ++s) {
    const JsonValue server = pstrain::report::parse_json(
        it::read_file(run / "metrics" / ("server-" + std::to_string(s) + ".json")), "server json");
    total += integer(server, key);
  }
  return total;
}

inline JsonValue read_summary(const fs::path& run) {
  return pstrain::report::parse_json(it::read_file(run / "summary.json"), (run / "summary.json").string());
}

inline std::set<std::int64_t> int_set(const JsonValue& array, const char* field = nullptr) {
  std::set<std::int64_t> out;
  for (const JsonValue& x : array.items()) out.insert(field == nullptr ? x.as_integer("rank") : integer(x, field));
  return out;
}

}  // namespace sweep
