// CUDA graphs for the CUDA backend: a whole training step's device work
// (forward, backward, loss, optimizer update) captured once per key (the
// batch size) and replayed on later steps of that key, so a step costs one
// graph launch instead of a launch per kernel.
//
// The step as the backend sees it, between Backend::begin_graph_step(key)
// and end_graph_step():
//   - the first step of a key runs as usual (kOff): its scratch memory, cuDNN
//     plans and cuBLAS state are made then, so nothing allocates while capturing;
//   - the second is captured (kCapture, relaxed capture mode on the backend's
//     stream): the layer and optimizer calls are recorded, not run; the batch's
//     copy_from_host runs at once, outside the graph;
//   - later ones replay (kReplay): the layer calls enqueue nothing; only the
//     values that change from step to step are taken: the dropout seeds and the
//     optimizer's coefficients (the learning rate follows the schedule). Each
//     such call writes its value to the next host slot; the captured kernels
//     read it from the same device slot, which end() fills before launching.
// So a replayed step runs the same kernels on the same buffers with the same
// per-step values as an uncaptured one: the same results, bit for bit.
// Anything that moves the captured buffers (the backend's scratch memory
// growing for a larger shape) invalidates the graphs: the backend passes an
// identity of its scratch memory to begin(), and a graph captured under
// another is dropped and captured again.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace pstrain::nn::cuda {

class StepGraphs {
 public:
  enum class Phase { kOff, kCapture, kReplay };
  // Per-step values of one step: at most kMaxSlots, each at most kSlotBytes.
  static constexpr std::size_t kSlotBytes = 64;
  static constexpr int kMaxSlots = 64;

  StepGraphs() = default;
  ~StepGraphs();
  StepGraphs(const StepGraphs&) = delete;
  StepGraphs& operator=(const StepGraphs&) = delete;

  Phase phase() const { return phase_; }
  bool replaying() const { return phase_ == Phase::kReplay; }
  bool capturing() const { return phase_ == Phase::kCapture; }
  bool active() const { return phase_ != Phase::kOff; }

  // Starts a step of `key` on `stream` (which must be idle of other work's
  // results the step reads: the caller synchronizes). false: this step runs
  // as usual (the key's first). `scratch` identifies the scratch memory the
  // step's kernels use. Throws ComputeError when CUDA refuses.
  using Scratch = std::pair<const void*, const void*>;
  bool begin(int key, cudaStream_t stream, Scratch scratch);
  // This step's next per-step value: written to its host slot; the device
  // address the captured kernel reads it from. Only while active().
  template <class T>
  const T* value(const T& v) {
    static_assert(sizeof(T) <= kSlotBytes, "a per-step value of at most kSlotBytes");
    return static_cast<const T*>(take_slot(&v, sizeof(T)));
  }
  // Notes buffers and a size the step's call uses (the loss, dropout and optimizer calls note
  // theirs): a replay whose notes differ from its capture's (another model's buffers under the
  // same key) is refused at end() instead of running the captured kernels on stale memory.
  void note(const void* a, const void* b, std::size_t size);
  // Ends the step: after a capture, instantiates its graph; then copies the
  // per-step values to the device and launches the graph on `stream`
  // (without waiting for it). Throws ComputeError when CUDA refuses or a
  // replay's per-step values or notes differ from its capture's.
  void end(cudaStream_t stream);
  // Ends an active step that failed midway: a capture is discarded, nothing
  // is launched. Never throws.
  void abort(cudaStream_t stream) noexcept;
  // Graphs held (for tests and logs).
  std::size_t num_graphs() const { return graphs_.size(); }

 private:
  struct Graph {
    cudaGraphExec_t exec = nullptr;
    int num_values = 0;
    Scratch scratch{};
    std::uint64_t notes = 0;
  };
  const void* take_slot(const void* host_value, std::size_t num_bytes);
  void drop(int key) noexcept;

  Phase phase_ = Phase::kOff;
  int key_ = 0;
  Scratch scratch_{};
  int num_values_ = 0;
  std::uint64_t notes_ = 0;  // a hash of this step's notes
  std::map<int, Graph> graphs_;
  std::set<int> seen_;                        // keys that ran once as usual
  std::vector<unsigned char> host_values_;    // kMaxSlots * kSlotBytes
  void* device_values_ = nullptr;             // the same on the device (cudaMalloc)
};

}  // namespace pstrain::nn::cuda
