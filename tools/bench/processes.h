// Helpers of the benchmarks that run every node as its own forked process
// (scheduler, servers, workers), as in a real job: fork a body, wait for
// children, pass one line between processes, take a median.
// Fork before this process starts any thread (ZeroMQ contexts, Gloo).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace pstrain::bench {

// Runs `body` in a child process that exits with its return value (1 and a
// message on stderr if it throws); returns the child's pid.
pid_t spawn(const std::function<int()>& body);

// Waits for every child; true when all exited with code 0.
bool wait_all(const std::vector<pid_t>& pids);

// A pipe carrying lines from children to the parent. Throws Error if it
// cannot be created.
class LinePipe {
 public:
  LinePipe();
  ~LinePipe();
  LinePipe(const LinePipe&) = delete;
  LinePipe& operator=(const LinePipe&) = delete;

  // Writes `line` + '\n' in one write (atomic for lines under PIPE_BUF bytes).
  bool write_line(const std::string& line) const;
  // Reads one line (without '\n'); "" at end of file, which comes once every
  // process holding the write end has exited or closed it.
  std::string read_line() const;
  // Closes this process's write end (the parent, once its children are forked).
  void close_write();

 private:
  int fds_[2] = {-1, -1};
};

double median(std::vector<double> values);

// The benchmarks' memcpy reference: median seconds of one memcpy of
// `num_bytes` between two buffers already written (no page faults inside the
// timed copies), over `rounds` timed copies after two warm-up ones; each
// round first changes a byte the copy must move.
double memcpy_seconds(std::size_t num_bytes, int rounds);

// Timed rounds for a tensor of `size_mib`: `requested` if > 0, else fewer
// for larger sizes (400 MiB in all, between 8 and 200 rounds).
int rounds_for(double size_mib, int requested);

}  // namespace pstrain::bench
