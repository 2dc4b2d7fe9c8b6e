// Which GPU an allreduce worker computes on: one GPU per worker of a
// machine, chosen by the worker's local rank (its rank among the workers on
// that machine), as NCCL needs distinct GPUs within one communicator.
#pragma once

#include <string>

namespace pstrain {

// The local rank a launcher gave this process: LOCAL_RANK (torchrun),
// SLURM_LOCALID, OMPI_COMM_WORLD_LOCAL_RANK or MPI_LOCALRANKID (MPICH), the
// first one set; -1 when none is (a malformed value is a ConfigError).
int local_rank_from_env();

// CUDA devices this process sees; 0 when built without CUDA or none is
// present (`why_not`, if given, then says why).
int visible_cuda_devices(std::string* why_not = nullptr);

// The workload.device for a worker with local rank `local_rank` on a
// machine with `num_gpus` GPUs: "cpu" and "cuda:N" as configured; "cuda"
// and, when num_gpus > 0, "auto" become "cuda:<local_rank mod num_gpus>";
// "auto" without GPUs stays "auto" (the backend factory explains the CPU).
std::string worker_device(const std::string& configured, int local_rank, int num_gpus);

}  // namespace pstrain
