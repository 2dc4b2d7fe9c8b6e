#include "tools/report/trace_merge.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>
#include <system_error>
#include <utility>

#include "common/base/errors.h"
#include "tools/report/json_text.h"
#include "tools/report/text_file.h"

namespace pstrain::report {
namespace {

namespace fs = std::filesystem;

struct Part {
  fs::path file;
  JsonValue root = JsonValue::null();
  std::string role;
  std::int64_t rank = -1;
};

int role_order(const std::string& role) {
  if (role == "scheduler") return 0;
  if (role == "server") return 1;
  if (role == "worker") return 2;
  return 3;
}

// Integers as integers (timestamps in µs exceed %g's 9 digits), other
// numbers in their shortest round-trip form.
void write_number(std::string& out, double x) {
  if (!std::isfinite(x)) {
    out += "null";
  } else if (x == std::floor(x) && std::fabs(x) < 9007199254740992.0) {
    out += std::to_string(static_cast<std::int64_t>(x));
  } else {
    char buf[32];
    const auto r = std::to_chars(buf, buf + sizeof(buf), x);
    out.append(buf, r.ptr);
  }
}

void write_json(std::string& out, const JsonValue& v) {
  switch (v.kind()) {
    case JsonValue::Kind::kNull: out += "null"; return;
    case JsonValue::Kind::kBool: out += v.as_bool("value") ? "true" : "false"; return;
    case JsonValue::Kind::kNumber: write_number(out, v.as_number("value")); return;
    case JsonValue::Kind::kString: out += json_quote(v.as_string("value")); return;
    case JsonValue::Kind::kArray:
      out += '[';
      for (std::size_t i = 0; i < v.items().size(); ++i) {
        if (i > 0) out += ',';
        write_json(out, v.items()[i]);
      }
      out += ']';
      return;
    case JsonValue::Kind::kObject:
      out += '{';
      for (std::size_t i = 0; i < v.items().size(); ++i) {
        if (i > 0) out += ',';
        out += json_quote(v.keys()[i]);
        out += ':';
        write_json(out, v.items()[i]);
      }
      out += '}';
      return;
  }
}

// The event with "pid" replaced (other members as they are).
void write_event(std::string& out, const JsonValue& event, std::int64_t pid) {
  out += '{';
  bool first = true;
  for (std::size_t i = 0; i < event.items().size(); ++i) {
    if (!first) out += ',';
    first = false;
    out += json_quote(event.keys()[i]);
    out += ':';
    if (event.keys()[i] == "pid") {
      out += std::to_string(pid);
    } else {
      write_json(out, event.items()[i]);
    }
  }
  out += '}';
}

std::string read_file(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw DataError(file.string() + ": cannot open");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Reads and checks one part; throws DataError naming the file.
Part read_part(const fs::path& file) {
  Part p;
  p.file = file;
  p.root = parse_json(read_file(file), file.string());
  const JsonValue* events = p.root.find("traceEvents");
  if (events == nullptr || events->kind() != JsonValue::Kind::kArray) {
    throw DataError(file.string() + ": no \"traceEvents\" array (not a pstrain trace part)");
  }
  for (std::size_t i = 0; i < events->items().size(); ++i) {
    const JsonValue& e = events->items()[i];
    const std::string where = file.string() + ": event " + std::to_string(i);
    if (e.kind() != JsonValue::Kind::kObject) throw DataError(where + ": not an object");
    const JsonValue* ph = e.find("ph");
    if (ph == nullptr) throw DataError(where + ": no \"ph\"");
    ph->as_string(where + " ph");
    if (const JsonValue* ts = e.find("ts")) ts->as_number(where + " ts");
  }
  if (const JsonValue* other = p.root.find("otherData")) {
    if (const JsonValue* role = other->find("role")) p.role = role->as_string(file.string() + ": otherData.role");
    if (const JsonValue* rank = other->find("rank")) p.rank = rank->as_integer(file.string() + ": otherData.rank");
  }
  return p;
}

std::int64_t other_integer(const Part& p, const char* key) {
  const JsonValue* other = p.root.find("otherData");
  const JsonValue* v = other != nullptr ? other->find(key) : nullptr;
  return v != nullptr && v->kind() == JsonValue::Kind::kNumber ? static_cast<std::int64_t>(v->as_number(key)) : 0;
}

std::string other_text(const Part& p, const char* key) {
  const JsonValue* other = p.root.find("otherData");
  const JsonValue* v = other != nullptr ? other->find(key) : nullptr;
  return v != nullptr && v->kind() == JsonValue::Kind::kString ? v->as_string(key) : "";
}

}  // namespace

TraceMergeResult merge_trace(const fs::path& run_dir) {
  TraceMergeResult result;
  const fs::path dir = run_dir / "trace";
  std::vector<fs::path> files;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    if (e.is_regular_file() && e.path().extension() == ".json") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  std::vector<Part> parts;
  for (const fs::path& f : files) {
    try {
      parts.push_back(read_part(f));
    } catch (const std::exception& e) {
      result.errors.push_back(std::string(e.what()) + " (part skipped)");
    }
  }
  if (parts.empty()) return result;
  std::stable_sort(parts.begin(), parts.end(), [](const Part& a, const Part& b) {
    if (role_order(a.role) != role_order(b.role)) return role_order(a.role) < role_order(b.role);
    return a.rank < b.rank;
  });

  std::string out = "{\"traceEvents\":[\n";
  std::string others = "[";
  bool first = true;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const Part& p = parts[i];
    const auto pid = static_cast<std::int64_t>(i + 1);
    out += std::string(first ? "" : ",\n") + "{\"ph\":\"M\",\"pid\":" + std::to_string(pid) +
           ",\"tid\":0,\"name\":\"process_sort_index\",\"args\":{\"sort_index\":" + std::to_string(pid) + "}}";
    first = false;
    for (const JsonValue& e : p.root.find("traceEvents")->items()) {
      out += ",\n";
      write_event(out, e, pid);
      if (e.find("ph")->as_string("ph") == "X") ++result.events;
    }
    const std::int64_t dropped = other_integer(p, "dropped_events");
    result.dropped_events += dropped;
    others += std::string(i > 0 ? "," : "") + "{\"file\":" + json_quote(p.file.filename().string()) +
              ",\"pid\":" + std::to_string(pid) + ",\"role\":" + json_quote(p.role) +
              ",\"rank\":" + std::to_string(p.rank) + ",\"os_pid\":" + std::to_string(other_integer(p, "os_pid")) +
              ",\"host\":" + json_quote(other_text(p, "host")) + ",\"level\":" + json_quote(other_text(p, "level")) +
              ",\"events\":" + std::to_string(other_integer(p, "events")) +
              ",\"dropped_events\":" + std::to_string(dropped) + "}";
  }
  others += "]";
  std::string errors = "[";
  for (std::size_t i = 0; i < result.errors.size(); ++i) {
    if (i > 0) errors += ',';
    errors += json_quote(result.errors[i]);
  }
  errors += "]";
  out += "\n],\"displayTimeUnit\":\"ms\",\"otherData\":{\"clock\":\"microseconds since the job start "
         "(PSTRAIN_JOB_START_US)\",\"clock_origin_unix_us\":" +
         std::to_string(other_integer(parts.front(), "clock_origin_unix_us")) +
         ",\"dropped_events\":" + std::to_string(result.dropped_events) + ",\"processes\":" + others +
         ",\"skipped_parts\":" + errors + "}}\n";
  result.parts = static_cast<int>(parts.size());
  result.output = run_dir / "trace.json";
  write_text_file_atomic(result.output, out);
  return result;
}

std::vector<std::string> check_trace(const JsonValue& trace, std::size_t max_problems) {
  std::vector<std::string> problems;
  auto problem = [&](std::string text) {
    if (problems.size() < max_problems) problems.push_back(std::move(text));
  };
  const JsonValue* events = trace.find("traceEvents");
  if (events == nullptr || events->kind() != JsonValue::Kind::kArray) return {"no \"traceEvents\" array"};
  struct Open {
    double end;
    std::string name;
  };
  struct ThreadState {
    double last_ts = -1.0;
    std::vector<Open> stack;
  };
  std::map<std::pair<std::int64_t, std::int64_t>, ThreadState> threads;
  for (std::size_t i = 0; i < events->items().size(); ++i) {
    const JsonValue& e = events->items()[i];
    const JsonValue* ph = e.find("ph");
    if (ph == nullptr || ph->kind() != JsonValue::Kind::kString) {
      problem("event " + std::to_string(i) + ": no \"ph\" string");
      continue;
    }
    if (ph->as_string("ph") != "X") continue;
    const JsonValue *pid = e.find("pid"), *tid = e.find("tid"), *ts = e.find("ts"), *dur = e.find("dur"),
                    *name = e.find("name");
    if (pid == nullptr || tid == nullptr || ts == nullptr || dur == nullptr || name == nullptr ||
        pid->kind() != JsonValue::Kind::kNumber || tid->kind() != JsonValue::Kind::kNumber ||
        ts->kind() != JsonValue::Kind::kNumber || dur->kind() != JsonValue::Kind::kNumber ||
        name->kind() != JsonValue::Kind::kString) {
      problem("event " + std::to_string(i) + ": a complete event needs numeric pid, tid, ts, dur and a name");
      continue;
    }
    const double start = ts->as_number("ts"), length = dur->as_number("dur"), end = start + length;
    const std::string label = "event " + std::to_string(i) + " '" + name->as_string("name") + "' (pid " +
                              std::to_string(static_cast<std::int64_t>(pid->as_number("pid"))) + ", tid " +
                              std::to_string(static_cast<std::int64_t>(tid->as_number("tid"))) + ")";
    if (start < 0 || length < 0) problem(label + ": negative ts or dur");
    ThreadState& t = threads[{static_cast<std::int64_t>(pid->as_number("pid")),
                              static_cast<std::int64_t>(tid->as_number("tid"))}];
    if (start < t.last_ts) problem(label + ": starts before the previous event of its thread");
    t.last_ts = std::max(t.last_ts, start);
    while (!t.stack.empty() && t.stack.back().end <= start) t.stack.pop_back();
    if (!t.stack.empty() && end > t.stack.back().end) {
      problem(label + ": starts inside '" + t.stack.back().name + "' but ends after it");
    }
    t.stack.push_back(Open{end, name->as_string("name")});
  }
  return problems;
}

}  // namespace pstrain::report
