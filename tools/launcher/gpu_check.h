// The job's GPU needs against this machine's GPUs, checked before anything
// starts (plan_launch): `workload.device = "cuda"` or allreduce's
// `collective.backend = "nccl"` on a host without NVIDIA's driver, and
// allreduce over NCCL with more workers on this host than GPUs
// visible here (NCCL needs one GPU per rank: two ranks on one device fail
// inside NCCL after the job has started). Workers on other hosts are not
// checked (their GPUs are not visible from here). With `device = "auto"` on a
// host without a driver, one note for the launcher to print, instead of a
// CUDA error from every worker.
#pragma once

#include <string>
#include <vector>

#include "common/config/config.h"
#include "common/observe/gpu_presence.h"

namespace pstrain::launcher {

struct GpuCheck {
  std::string problem;  // non-empty: the refusal (key, why, fix), without the config site
  std::string key;      // the key it names: workload.device, collective.backend or cluster.workers
  std::string note;     // non-empty: one line to print (device "auto" without a GPU)
};

// local_workers: how many of the job's workers start on this machine.
// nccl_built: whether the workers were built with NCCL (collective.backend
// "auto" picks it for a model on a GPU only then).
GpuCheck check_gpus(const RunConfig& config, int local_workers, const GpuPresence& gpus, bool nccl_built);

}  // namespace pstrain::launcher
