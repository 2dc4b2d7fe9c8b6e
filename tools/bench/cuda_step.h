// bench_train_step --device cuda: the whole training step of a model on the
// CUDA backend (the batch uploaded from the host, forward, backward, the SGD
// update of the default job, synchronized: what the single-worker trainer
// does per step), per batch size, as usual and as one CUDA graph per step
// (workload.cuda_graphs); each layer's forward and backward on its own
// (synchronized timers around each); and, in the same run, the same model's
// step in PyTorch (tools/torch_step_bench.py) when its python3 has torch.
#pragma once

#include <string>
#include <vector>

namespace pstrain::bench {

struct CudaStepOptions {
  std::string model = "fmnist_cnn";
  std::vector<int> batches{64, 256, 512, 1024};
  std::string precision = "fp32";  // "fp32" or "tf32" (workload.precision)
  int reps = 50;                   // timed steps per batch (after warm-up)
  std::string torch_script;        // empty: no PyTorch comparison
  std::string python = "python3";
  std::string json_path;           // empty: table only
};

// Runs the benchmark and prints its tables; 77 (with a line saying why) when
// no CUDA device is usable, 0 otherwise. Throws on a failed measurement.
int run_cuda_step_bench(const CudaStepOptions& options);

}  // namespace pstrain::bench
