// Collective operations among the workers of one allreduce job: the mean of
// a float range over all ranks, a broadcast and a barrier, on Gloo (host
// memory, TCP) or NCCL (CUDA device memory).
//
// Buffers live in the collective's memory space: host memory when
// device_memory() is false, this rank's CUDA device memory when it is true.
// Every rank must issue the same operations with the same sizes in the same
// order (the caller's contract; a mismatch is a hang until the timeout or
// an error, never silently wrong data).
//
// start_allreduce_mean() only starts an operation: the range must stay alive
// and untouched by the caller until wait_all() has returned true. Operations
// complete in the order they were started. broadcast() and barrier() block,
// after everything started before them.
//
// The mean is the sum over ranks divided by size() with the servers'
// arithmetic (server/shard_store.cc): times 1/size() when size() is a power
// of two (exact), else divided by size(). With two ranks it is bit-identical
// to the sync parameter server's mean.
//
// Not thread-safe: one thread owns a Collective (implementations run their
// own communication thread or CUDA stream inside). Failures (a peer gone, a
// timeout) raise TransportError or TimeoutError naming the operation, its
// size and this rank; after one, every later call raises it again.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

namespace pstrain {

class Collective {
 public:
  virtual ~Collective() = default;

  virtual std::string name() const = 0;  // e.g. "gloo (tcp, 127.0.0.1)", "nccl 2.28 (cuda:0)"
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual bool device_memory() const = 0;

  // Starts replacing data[0, num_elems) by its mean over all ranks.
  virtual void start_allreduce_mean(float* data, std::size_t num_elems) = 0;
  // Waits at most `timeout` for every started operation: true when all have
  // completed (rethrows the first failure), false when some are still running.
  virtual bool wait_all(std::chrono::milliseconds timeout) = 0;
  // Copies root's data[0, num_elems) to every rank.
  virtual void broadcast(float* data, std::size_t num_elems, int root) = 0;
  // Returns once every rank has entered the barrier.
  virtual void barrier() = 0;

  // start_allreduce_mean + wait_all until done (bounded by the backend's own timeout).
  void allreduce_mean(float* data, std::size_t num_elems);
};

}  // namespace pstrain
