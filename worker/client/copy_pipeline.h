// The parameter-server worker's copy pipeline: gradients out of the
// backend and weights into it, chunk by chunk, on a copy engine (the "copy
// stream", worker/nn/copy_engine.h) and a communication thread, so that the
// training thread never waits for a copy or a push, and waits for a pull only
// where a layer's forward needs its weights.
//
// Gradients out (training thread: grads_ready(), as backward reports layers
// last first): every chunk now lying within the ranges reported this step,
// not handled yet, gets a download (device gradients -> the host buffer the
// push is sent from, e.g. the transport's arena), ordered after the backward
// work queued so far; then a job on the communication thread pushes them as
// their downloads complete: it waits for the next chunk's event and calls
// `push` with that chunk and the ones after it already copied. So a push never
// reads a chunk before its copy completed, the first chunks of a large layer
// leave while the rest are still being copied, and pushes go in the order
// backward reported them.
//
// Weights in: begin_pull() before a pull is sent marks every chunk pending;
// chunk_arrived(k) (called by whichever thread receives chunk k's reply,
// KVClient's pull hook) enqueues chunk k's upload (host weights -> device).
// before_forward(range) (training thread, before a layer's forward) waits
// until every chunk overlapping the range has arrived, then orders the
// training stream after their uploads (the CPU: waits for them; CUDA: the
// stream waits on the event, the host does not). finish_pull() waits for
// every chunk and every upload (before an evaluation, or the loop's end).
// Pulls are sent chunk by chunk in flat order, which is forward order.
//
// bfloat16 on the wire (PipelineBuffers::wire_grads / wire_params set): the
// downloads narrow on the engine (download_narrowed: the CUDA copy stream's
// kernel before the copy; the host engine's copy thread) into wire_grads,
// which the pushes send as they are; the pulls land in wire_params as
// received and the uploads widen them into device_params on the engine. The
// same rules hold: a push never reads a chunk before its narrowing and copy
// completed; a forward never runs before its chunks' widening completed.
//
// Jobs run on one CommThread (worker/collective/comm_thread.h) in
// submission order; a job that throws fails the pipeline: the waits of the
// training thread (before_forward, finish_pull, wait_jobs) rethrow it.
// Objects the jobs use (the KV client) belong to the communication thread
// from submit() until wait_jobs() returns.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <span>
#include <vector>

#include "common/math/shard_map.h"
#include "common/observe/trace.h"
#include "worker/collective/comm_thread.h"
#include "worker/nn/copy_engine.h"

namespace pstrain {

// Whole flat buffers (map.total_elems() elements each, or empty where unused).
struct PipelineBuffers {
  std::span<float> host_grads;    // float32 wire: the pushes' source (the whole flat gradient)
  std::span<float> host_params;   // float32 wire: the pulls' destination (the whole flat weights)
  // null: the gradients are already on the host, in host_grads or wire_grads (simulated compute)
  const float* device_grads = nullptr;
  // null: nothing to upload (float32 pulls written straight into the model's own memory)
  float* device_params = nullptr;
  std::span<std::uint16_t> wire_grads{};   // bfloat16 wire: the pushes' source, narrowed by the engine
  std::span<std::uint16_t> wire_params{};  // bfloat16 wire: the pulls' destination, widened by the engine
  bool bfloat16() const { return !wire_grads.empty(); }
};

class CopyPipeline {
 public:
  // Runs on the communication thread once `keys`' downloads have completed.
  using PushFn = std::function<void(const std::vector<std::int64_t>& keys)>;

  // `engine` outlives the pipeline; buffers cover map.total_elems() floats.
  CopyPipeline(const ShardMap& map, nn::CopyEngine& engine, PipelineBuffers buffers, TraceRecorder* trace = nullptr);
  ~CopyPipeline();  // lets the running job finish (the CommThread's rule), drops the rest
  CopyPipeline(const CopyPipeline&) = delete;
  CopyPipeline& operator=(const CopyPipeline&) = delete;

  // ---- gradients out (training thread) ----
  void begin_step();  // no chunk of this step handled yet
  void grads_ready(std::int64_t offset, std::int64_t count, PushFn push);

  // ---- weights in ----
  void begin_pull();                     // training thread, before the pull is sent
  void chunk_arrived(std::int64_t key);  // any thread; ignored for a chunk not pending
  // The pull's wait returned: every chunk still pending has arrived (a reply
  // path that reported no chunk_arrived costs pipelining, never a hang).
  void pull_complete();
  void before_forward(std::int64_t offset, std::int64_t count);  // training thread
  void finish_pull();                    // training thread

  // ---- the communication thread ----
  void submit(std::function<void()> job);
  void wait_jobs();  // every job submitted has run (rethrows a job's failure)

  // For tests and the trace: how many threads wait in before_forward/finish_pull for a chunk to arrive now.
  int waiting_for_arrival() const;
  // Seconds the training thread spent blocked in before_forward (arrivals and uploads), in all.
  double forward_wait_s() const { return forward_wait_s_; }

 private:
  // Blocks until every chunk in [first, last] has arrived; returns the
  // highest upload event among them (0: none).
  nn::CopyEngine::Event wait_arrived(std::int64_t first, std::int64_t last);
  void push_when_copied(const std::vector<std::int64_t>& keys, const std::vector<nn::CopyEngine::Event>& events,
                        const PushFn& push);  // the communication thread
  void rethrow_if_failed();

  const ShardMap& map_;
  nn::CopyEngine& engine_;
  PipelineBuffers buffers_;
  TraceRecorder* trace_;
  std::vector<bool> handled_;  // this step's chunks already downloaded (training thread)
  mutable std::mutex mutex_;
  std::condition_variable arrived_cv_;
  std::vector<bool> pending_;                          // per chunk: its pull reply not yet arrived
  std::vector<nn::CopyEngine::Event> upload_event_;    // per chunk: its last upload
  bool failed_ = false;
  int waiting_ = 0;
  double forward_wait_s_ = 0.0;
  CommThread comm_;
};

}  // namespace pstrain
