#include "worker/nn/cuda/step_graph.h"

#include <cstring>
#include <string>

#include "common/base/errors.h"
#include "worker/nn/cuda/cuda_check.h"

namespace pstrain::nn::cuda {

StepGraphs::~StepGraphs() {
  for (auto& [key, graph] : graphs_) static_cast<void>(cudaGraphExecDestroy(graph.exec));
  if (device_values_ != nullptr) static_cast<void>(cudaFree(device_values_));
}

void StepGraphs::drop(int key) noexcept {
  if (auto found = graphs_.find(key); found != graphs_.end()) {
    static_cast<void>(cudaGraphExecDestroy(found->second.exec));
    graphs_.erase(found);
  }
}

bool StepGraphs::begin(int key, cudaStream_t stream, Scratch scratch) {
  if (active()) throw ComputeError("CUDA graph step: begin_graph_step while a graph step is in progress");
  if (seen_.insert(key).second) return false;  // the key's first step runs as usual
  if (device_values_ == nullptr) {
    check_cuda(cudaMalloc(&device_values_, kSlotBytes * kMaxSlots), "CUDA graph step: cudaMalloc of per-step values");
    host_values_.assign(kSlotBytes * kMaxSlots, 0);
  }
  if (auto found = graphs_.find(key); found != graphs_.end() && found->second.scratch != scratch) drop(key);
  key_ = key;
  scratch_ = scratch;
  num_values_ = 0;
  notes_ = 0;
  if (graphs_.count(key) != 0) {
    phase_ = Phase::kReplay;
    return true;
  }
  check_cuda(cudaStreamSynchronize(stream), "CUDA graph step: waiting before the capture");
  // Relaxed: the batch's upload (a synchronous copy outside the stream) may run while capturing.
  check_cuda(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed), "CUDA graph step: cudaStreamBeginCapture");
  phase_ = Phase::kCapture;
  return true;
}

const void* StepGraphs::take_slot(const void* host_value, std::size_t num_bytes) {
  if (!active()) throw ComputeError("CUDA graph step: a per-step value outside a graph step");
  if (num_values_ >= kMaxSlots) {
    throw ComputeError("CUDA graph step: more than " + std::to_string(kMaxSlots) + " per-step values in one step");
  }
  const std::size_t offset = static_cast<std::size_t>(num_values_++) * kSlotBytes;
  std::memcpy(host_values_.data() + offset, host_value, num_bytes);
  return static_cast<const unsigned char*>(device_values_) + offset;
}

void StepGraphs::note(const void* a, const void* b, std::size_t size) {
  for (const std::uint64_t v : {static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(a)),
                                static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(b)),
                                static_cast<std::uint64_t>(size)}) {
    notes_ = (notes_ ^ v) * 0x100000001B3ull + 0x9E3779B97F4A7C15ull;
  }
}

void StepGraphs::end(cudaStream_t stream) {
  if (!active()) throw ComputeError("CUDA graph step: end_graph_step without begin_graph_step");
  const Phase phase = phase_;
  phase_ = Phase::kOff;
  if (phase == Phase::kCapture) {
    cudaGraph_t graph = nullptr;
    check_cuda(cudaStreamEndCapture(stream, &graph), "CUDA graph step: cudaStreamEndCapture");
    cudaGraphExec_t exec = nullptr;
    const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
    static_cast<void>(cudaGraphDestroy(graph));
    check_cuda(made, "CUDA graph step: cudaGraphInstantiate");
    graphs_[key_] = Graph{exec, num_values_, scratch_, notes_};
  }
  const Graph& graph = graphs_.at(key_);
  if (graph.num_values != num_values_ || graph.notes != notes_) {
    const int key = key_;
    drop(key);
    seen_.erase(key);  // its next step runs as usual, then is captured anew
    throw ComputeError("CUDA graph step: a step of key " + std::to_string(key) + " made other calls (" +
                       std::to_string(num_values_) + " per-step values, its capture " +
                       std::to_string(graph.num_values) + ") or used other buffers than its capture: a key must "
                       "always be the same step of the same model");
  }
  if (num_values_ > 0) {
    // Pageable source: the copy is staged before this returns, so the host slots may be rewritten.
    check_cuda(cudaMemcpyAsync(device_values_, host_values_.data(), static_cast<std::size_t>(num_values_) * kSlotBytes,
                               cudaMemcpyHostToDevice, stream),
               "CUDA graph step: copying the per-step values");
  }
  check_cuda(cudaGraphLaunch(graph.exec, stream), "CUDA graph step: cudaGraphLaunch");
}

void StepGraphs::abort(cudaStream_t stream) noexcept {
  if (phase_ == Phase::kCapture) {
    cudaGraph_t graph = nullptr;
    if (cudaStreamEndCapture(stream, &graph) == cudaSuccess && graph != nullptr) {
      static_cast<void>(cudaGraphDestroy(graph));
    }
    static_cast<void>(cudaGetLastError());
    seen_.erase(key_);  // the next step of this key runs as usual again
  }
  phase_ = Phase::kOff;
}

}  // namespace pstrain::nn::cuda
