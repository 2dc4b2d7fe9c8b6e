// CPU time of this process's threads by name, and its resident memory, from
// /proc/self (Linux): how a benchmark that runs a whole cluster in one process
// (tools/cluster/local_cluster.h names its threads ps-scheduler, ps-server-N)
// tells one node's CPU time from another's.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace pstrain::bench {

// Seconds of CPU (user + system) used so far by each thread still alive,
// summed by thread name (/proc/self/task/*/comm; a thread's name is 15
// characters at most and new threads take their creator's). Threads that have
// ended are not counted.
std::map<std::string, double> cpu_seconds_by_thread_name();

// The kernel's split of each thread's CPU into user space (the program and its
// libraries) and the kernel (system calls, the wake-ups they cause), summed by
// thread name as above: /proc/self/task/*/stat's utime and stime, sampled at
// the clock tick (10 ms), so only a window of a second or more splits well.
struct UserSystem {
  double user_s = 0, system_s = 0;
};
std::map<std::string, UserSystem> user_system_by_thread_name();

// CPU seconds of the threads whose name starts with `prefix`, in `by_name`.
double cpu_seconds_with_prefix(const std::map<std::string, double>& by_name, const std::string& prefix);

// Makes the calling thread SCHED_BATCH (Linux; threads it starts afterwards
// inherit it): a wake-up of the thread no longer preempts the thread running
// on that core, it waits for the core's next turn. Error naming the reason if
// the kernel refuses. For simulated nodes whose wake-ups would, on a real
// cluster, happen on hosts of their own (docs/scaling.md).
void make_this_thread_batch();

// This process's threads whose name starts with `prefix` and whose scheduling
// policy is SCHED_BATCH (/proc/self/task/*/stat, field 41).
int batch_threads_with_prefix(const std::string& prefix);

// This process's resident memory (VmRSS), bytes; 0 if unknown.
std::int64_t resident_bytes();

}  // namespace pstrain::bench
