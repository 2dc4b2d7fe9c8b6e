// The CUDA copy engine (nn::CopyEngine, worker/nn/copy_engine.h): a second,
// non-blocking stream on the backend's device for the parameter-server
// worker's gradient downloads and weight uploads.
//   - Each copy is ordered after the work the backend's stream has queued
//     when it is enqueued: an event recorded there, waited on by the copy
//     stream (cudaStreamWaitEvent: neither the host nor the training stream
//     waits).
//   - Its completion is an event on the copy stream; done() queries it,
//     wait() synchronizes on it (the communication thread, never the
//     training thread), order_compute_after() makes the backend's stream
//     wait on it (a layer's forward after its weights' upload).
//   - register_host() page-locks the host buffers (cudaHostRegister), so
//     the copies are DMA from and to the transport's memory with no staging;
//     a range the driver refuses stays pageable (the copies still run).
//   - CUDA events come from a pool recycled once complete: no allocation per
//     copy once warm.
// Every method may be called from any thread (one mutex).
#pragma once

#include <memory>

#include "common/observe/trace.h"
#include "worker/nn/backend.h"
#include "worker/nn/copy_engine.h"

namespace pstrain::nn::cuda {

// `backend` must be the CUDA backend (ComputeError otherwise) and outlive the engine.
std::unique_ptr<CopyEngine> make_cuda_copy_engine(Backend& backend, TraceRecorder* trace);

}  // namespace pstrain::nn::cuda
