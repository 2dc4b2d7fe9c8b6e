#include "common/observe/trace.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <system_error>

#include "common/base/errors.h"
#include "common/base/json_line.h"

namespace pstrain {

TraceLevel parse_trace_level(std::string_view name) {
  if (name == "off") return TraceLevel::kOff;
  if (name == "steps") return TraceLevel::kSteps;
  if (name == "all") return TraceLevel::kAll;
  throw ConfigError("trace level '" + std::string(name) + "': expected \"off\", \"steps\" or \"all\"");
}

std::string_view to_string(TraceLevel level) {
  switch (level) {
    case TraceLevel::kOff: return "off";
    case TraceLevel::kSteps: return "steps";
    case TraceLevel::kAll: return "all";
  }
  return "?";
}

TraceRecorder::TraceRecorder(TraceLevel level, JobClock clock, std::size_t max_events)
    : level_(level), clock_(clock), max_events_(max_events) {}

void TraceRecorder::set_process(std::string role, int rank) {
  std::lock_guard lock(mutex_);
  role_ = std::move(role);
  rank_ = rank;
}

std::string TraceRecorder::process_label() const {
  std::lock_guard lock(mutex_);
  return rank_ >= 0 ? role_ + " " + std::to_string(rank_) : role_;
}

std::string TraceRecorder::file_name() const {
  std::lock_guard lock(mutex_);
  if (role_ == "scheduler") return "scheduler.json";  // one per job, no rank
  return role_ + "-" + (rank_ >= 0 ? std::to_string(rank_) : "pid" + std::to_string(getpid())) + ".json";
}

std::uint32_t TraceRecorder::thread_locked(std::thread::id id) {
  for (const Thread& t : threads_) {
    if (t.os_id == id) return t.tid;
  }
  const auto tid = static_cast<std::uint32_t>(threads_.size() + 1);
  threads_.push_back(Thread{id, "thread " + std::to_string(tid), tid});
  return tid;
}

std::uint32_t TraceRecorder::this_thread() {
  std::lock_guard lock(mutex_);
  return thread_locked(std::this_thread::get_id());
}

void TraceRecorder::name_this_thread(std::string name) {
  std::lock_guard lock(mutex_);
  const std::uint32_t tid = thread_locked(std::this_thread::get_id());
  threads_[tid - 1].name = std::move(name);
}

std::uint32_t TraceRecorder::track(const std::string& name) {
  std::lock_guard lock(mutex_);
  for (const Thread& t : threads_) {
    if (t.os_id == std::thread::id() && t.name == name) return t.tid;
  }
  const auto tid = static_cast<std::uint32_t>(threads_.size() + 1);
  threads_.push_back(Thread{std::thread::id(), name, tid});
  return tid;
}

const char* TraceRecorder::intern(std::string_view text) {
  std::lock_guard lock(mutex_);
  for (const std::string& s : interned_) {
    if (s == text) return s.c_str();
  }
  return interned_.emplace_back(text).c_str();
}

void TraceRecorder::record(const TraceEvent& event) {
  std::lock_guard lock(mutex_);
  if (events_.size() >= max_events_) {
    ++dropped_;
    return;
  }
  events_.push_back(event);
}

void TraceRecorder::record_on_this_thread(TraceEvent event) {
  std::lock_guard lock(mutex_);
  if (events_.size() >= max_events_) {
    ++dropped_;
    return;
  }
  event.tid = thread_locked(std::this_thread::get_id());
  events_.push_back(event);
}

void TraceRecorder::record(std::uint32_t tid, const char* name, const char* cat, std::int64_t ts_us,
                           std::int64_t dur_us, std::initializer_list<TraceArg> args) {
  TraceEvent e;
  e.name = name;
  e.cat = cat;
  e.ts_us = ts_us;
  e.dur_us = std::max<std::int64_t>(0, dur_us);
  e.tid = tid;
  for (const TraceArg& a : args) {
    if (e.num_args < TraceEvent::kMaxArgs) e.args[e.num_args++] = a;
  }
  record(e);
}

std::size_t TraceRecorder::size() const {
  std::lock_guard lock(mutex_);
  return events_.size();
}

std::int64_t TraceRecorder::dropped() const {
  std::lock_guard lock(mutex_);
  return dropped_;
}

std::vector<TraceEvent> TraceRecorder::events() const {
  std::vector<TraceEvent> out;
  {
    std::lock_guard lock(mutex_);
    out.assign(events_.begin(), events_.end());
  }
  // Spans are recorded when they end (children before parents): order by
  // start, the longer (enclosing) one first, so that each thread's events
  // are in time order and parents come before their children.
  std::stable_sort(out.begin(), out.end(), [](const TraceEvent& a, const TraceEvent& b) {
    return a.ts_us != b.ts_us ? a.ts_us < b.ts_us : a.dur_us > b.dur_us;
  });
  return out;
}

namespace {

std::string metadata(std::int64_t pid, std::uint32_t tid, const char* what, const std::string& args) {
  return JsonLine()
      .add("ph", "M")
      .add("pid", pid)
      .add("tid", static_cast<std::int64_t>(tid))
      .add("name", what)
      .raw("args", args)
      .str();
}

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "";
  return buf;
}

}  // namespace

std::string TraceRecorder::to_json() const {
  const std::vector<TraceEvent> sorted = events();
  std::vector<Thread> threads;
  std::int64_t dropped = 0;
  {
    std::lock_guard lock(mutex_);
    threads = threads_;
    dropped = dropped_;
  }
  const auto pid = static_cast<std::int64_t>(getpid());
  std::string out = "{\"traceEvents\":[\n";
  out += metadata(pid, 0, "process_name", JsonLine().add("name", process_label()).str());
  for (const Thread& t : threads) {
    out += ",\n" + metadata(pid, t.tid, "thread_name", JsonLine().add("name", t.name).str());
    out += ",\n" + metadata(pid, t.tid, "thread_sort_index",
                            JsonLine().add("sort_index", static_cast<std::int64_t>(t.tid)).str());
  }
  for (const TraceEvent& e : sorted) {
    JsonLine args;
    for (int i = 0; i < e.num_args; ++i) args.add(e.args[i].key, e.args[i].value);
    out += ",\n" + JsonLine()
                       .add("ph", "X")
                       .add("pid", pid)
                       .add("tid", static_cast<std::int64_t>(e.tid))
                       .add("name", e.name)
                       .add("cat", e.cat)
                       .add("ts", e.ts_us)
                       .add("dur", e.dur_us)
                       .raw("args", args.str())
                       .str();
  }
  std::string role;
  int rank = -1;
  {
    std::lock_guard lock(mutex_);
    role = role_;
    rank = rank_;
  }
  out += "\n],\"displayTimeUnit\":\"ms\",\"otherData\":";
  out += JsonLine()
             .add("role", role)
             .add("rank", rank)
             .add("os_pid", pid)
             .add("host", host_name())
             .add("level", to_string(level_))
             .add("events", static_cast<std::int64_t>(sorted.size()))
             .add("dropped_events", dropped)
             .add("max_events", static_cast<std::int64_t>(max_events_))
             .add("clock_origin_unix_us", clock_.origin_unix_us())
             .str();
  out += "}\n";
  return out;
}

void TraceRecorder::write(const std::filesystem::path& dir) const {
  if (level_ == TraceLevel::kOff) return;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw Error("cannot create directory " + dir.string() + ": " + ec.message());
  const std::filesystem::path file = dir / file_name();
  const std::filesystem::path tmp = file.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary);
    out << to_json();
    out.close();
    if (!out) throw Error("cannot write " + tmp.string());
  }
  std::filesystem::rename(tmp, file, ec);
  if (ec) throw Error("cannot rename " + tmp.string() + " to " + file.string() + ": " + ec.message());
}

std::string TraceRecorder::write_noexcept(const std::filesystem::path& dir) const noexcept {
  try {
    write(dir);
    return "";
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown error";
  }
}

namespace {

// The TraceFileGuards alive in this process; the lock also keeps one guard's
// writes (at a signal, at the end of its scope) from overlapping.
struct LiveGuards {
  std::mutex mutex;
  std::vector<const TraceFileGuard*> guards;
};

LiveGuards& live_guards() {
  static LiveGuards* guards = new LiveGuards;  // never destroyed: a signal may come during exit
  return *guards;
}

}  // namespace

TraceFileGuard::TraceFileGuard(const TraceRecorder& trace, std::filesystem::path dir)
    : trace_(trace), dir_(std::move(dir)) {
  LiveGuards& live = live_guards();
  std::lock_guard lock(live.mutex);
  live.guards.push_back(this);
}

TraceFileGuard::~TraceFileGuard() {
  LiveGuards& live = live_guards();
  std::lock_guard lock(live.mutex);
  std::erase(live.guards, this);
  const std::string error = write_now();
  if (!error.empty()) std::fprintf(stderr, "trace: %s\n", error.c_str());
}

std::vector<std::string> write_live_trace_files() noexcept {
  std::vector<std::string> errors;
  try {
    LiveGuards& live = live_guards();
    std::lock_guard lock(live.mutex);
    for (const TraceFileGuard* guard : live.guards) {
      if (std::string error = guard->write_now(); !error.empty()) errors.push_back(std::move(error));
    }
  } catch (const std::exception& e) {
    errors.emplace_back(e.what());
  }
  return errors;
}

std::filesystem::path trace_dir(const std::string& run_dir) {
  return run_dir.empty() ? std::filesystem::path() : std::filesystem::path(run_dir) / "trace";
}

}  // namespace pstrain
