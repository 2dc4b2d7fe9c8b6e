// Bytes one process has sent and received: one TrafficCounters per node,
// owned by its main and handed to what talks (the transport's send and
// receive paths, the allreduce collectives), read by the resource sampler
// (common/observe/resource_sampler.h) from another thread.
//
// What counts:
//   bytes_sent, bytes_received  the frames of every pstrain message that
//       passed common/transport/transport.h with these counters attached: header and
//       payload frames (ROUTER routing ids are local bookkeeping and are not
//       counted), on every socket of the process (data, heartbeat,
//       scheduler). ZeroMQ's and TCP's own framing is not included.
//   collective_bytes  allreduce workers: the bytes of the float ranges this
//       rank handed to allreduce and broadcast (Gloo and NCCL move them on
//       their own connections, which bypass the transport). It is the data
//       reduced, not the wire traffic: a ring allreduce of B bytes sends and
//       receives about 2 (n-1)/n B on each of n ranks.
// Relaxed atomics: the counters order nothing, they only add up.
#pragma once

#include <atomic>
#include <cstdint>

namespace pstrain {

class TrafficCounters {
 public:
  void add_sent(std::uint64_t bytes) { sent_.fetch_add(bytes, std::memory_order_relaxed); }
  void add_received(std::uint64_t bytes) { received_.fetch_add(bytes, std::memory_order_relaxed); }
  void add_collective(std::uint64_t bytes) { collective_.fetch_add(bytes, std::memory_order_relaxed); }

  std::uint64_t bytes_sent() const { return sent_.load(std::memory_order_relaxed); }
  std::uint64_t bytes_received() const { return received_.load(std::memory_order_relaxed); }
  std::uint64_t collective_bytes() const { return collective_.load(std::memory_order_relaxed); }

 private:
  std::atomic<std::uint64_t> sent_{0};
  std::atomic<std::uint64_t> received_{0};
  std::atomic<std::uint64_t> collective_{0};
};

}  // namespace pstrain
