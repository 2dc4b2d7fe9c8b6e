// One clock for every process of a job, so that log lines, trace spans and
// resource samples of different processes line up.
//
// Time is measured on the wall clock (CLOCK_REALTIME) from the job's origin:
// the launcher picks the origin once and hands it to every process it starts
// in the environment variable PSTRAIN_JOB_START_US (microseconds since the
// Unix epoch). A process started by hand, by SLURM or mpirun without it uses
// its own start as origin; absolute times (origin_unix_us() + now_us()) are
// still comparable across processes and, with synchronized clocks, hosts.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace pstrain {

inline constexpr const char* kJobStartEnv = "PSTRAIN_JOB_START_US";

class JobClock {
 public:
  explicit JobClock(std::int64_t origin_unix_us) : origin_unix_us_(origin_unix_us) {}

  // The origin from PSTRAIN_JOB_START_US when it holds a positive integer, else now.
  static JobClock from_environment() {
    if (const char* value = std::getenv(kJobStartEnv)) {
      char* end = nullptr;
      const long long origin = std::strtoll(value, &end, 10);
      if (end != value && *end == '\0' && origin > 0) return JobClock(origin);
    }
    return JobClock(unix_now_us());
  }

  static std::int64_t unix_now_us() {
    return std::chrono::duration_cast<std::chrono::microseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }

  std::int64_t origin_unix_us() const { return origin_unix_us_; }
  // Microseconds since the origin (negative only if the wall clock stepped back).
  std::int64_t now_us() const { return unix_now_us() - origin_unix_us_; }
  double now_s() const { return static_cast<double>(now_us()) * 1e-6; }

 private:
  std::int64_t origin_unix_us_;
};

}  // namespace pstrain
