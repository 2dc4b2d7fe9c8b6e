#include "tools/report/scheduler_records.h"

#include <fstream>

#include "common/base/errors.h"
#include "tools/report/json_value.h"

namespace pstrain::report {

std::filesystem::path scheduler_records_file(const std::filesystem::path& run_dir) {
  return run_dir / "metrics" / "scheduler.jsonl";
}

bool parse_scheduler_record(std::string_view line, std::string_view where, std::vector<AbandonedJoinRecord>& out) {
  const JsonValue v = parse_json(line, where);
  const std::string context(where);
  auto field = [&](const char* key) -> const JsonValue& {
    const JsonValue* f = v.find(key);
    if (f == nullptr) throw DataError(context + ": no key '" + key + "'");
    return *f;
  };
  if (field("type").as_string(context + ": key 'type'") != "join_abandoned") return false;
  AbandonedJoinRecord r;
  r.rank = static_cast<int>(field("rank").as_integer(context + ": key 'rank'"));
  r.change = field("change").as_integer(context + ": key 'change'");
  r.time_s = field("time_s").as_number(context + ": key 'time_s'");
  r.reason = field("reason").as_string(context + ": key 'reason'");
  if (r.rank < 0) throw DataError(context + ": key 'rank': " + std::to_string(r.rank) + " is not a worker's rank");
  out.push_back(std::move(r));
  return true;
}

std::vector<AbandonedJoinRecord> read_scheduler_records(const std::filesystem::path& run_dir,
                                                        std::vector<std::string>& warnings) {
  std::vector<AbandonedJoinRecord> out;
  const std::filesystem::path file = scheduler_records_file(run_dir);
  std::ifstream in(file);
  if (!in) return out;
  int n = 0;
  for (std::string line; std::getline(in, line);) {
    ++n;
    if (line.empty()) continue;
    const std::string where = file.string() + ":" + std::to_string(n);
    try {
      parse_scheduler_record(line, where, out);
    } catch (const DataError& e) {
      warnings.push_back(std::string("a scheduler record left out: ") + e.what());
    }
  }
  return out;
}

}  // namespace pstrain::report
