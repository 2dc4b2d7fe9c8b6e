// Reader of the scheduler's records (RUN_DIR/metrics/scheduler.jsonl,
// written by pstrain-scheduler: scheduler/job_records.h;
// docs/run_directory.md): what it decided about the job's membership that no
// worker's metrics show. For now "join_abandoned": a --join worker that
// failed before its boundary, its slot vacant again and its change gone on
// without it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace pstrain::report {

struct AbandonedJoinRecord {
  int rank = -1;
  std::int64_t change = -1;  // the membership change it was to enter with (-1: none)
  double time_s = 0;         // job clock: when the scheduler abandoned it
  std::string reason;
};

// One line of the file; false (nothing added) for another type of record,
// DataError naming `where` and the key for a malformed one.
bool parse_scheduler_record(std::string_view line, std::string_view where, std::vector<AbandonedJoinRecord>& out);

// The abandoned joins of the file, in order; none when it does not exist.
// A line that cannot be used (a cut last line, a malformed record) is left
// out with a line in `warnings` naming the file, the line and why.
std::vector<AbandonedJoinRecord> read_scheduler_records(const std::filesystem::path& run_dir,
                                                        std::vector<std::string>& warnings);

std::filesystem::path scheduler_records_file(const std::filesystem::path& run_dir);

}  // namespace pstrain::report
