// Picks and builds a job's collective: collective.backend "auto" means NCCL
// when the model runs on a GPU (and NCCL was compiled in), else Gloo.
// A backend that cannot serve this worker is a ConfigError saying why
// (not compiled in, NCCL for a model on the CPU, no CUDA device).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "common/observe/trace.h"
#include "worker/collective/collective.h"
#include "worker/collective/rendezvous_store.h"

namespace pstrain {

struct CollectiveOptions {
  int rank = 0;
  int size = 1;
  std::chrono::milliseconds timeout{120000};  // the rendezvous, and each operation
  std::string host = "127.0.0.1";             // gloo: this machine's address that the peers dial
  int cuda_device = 0;                        // nccl: this rank's GPU
  std::string key_prefix = "collective/";     // namespace of the rendezvous keys
  TraceRecorder* trace = nullptr;             // gloo, level "all": a span per bucket on the comm thread
  // Gloo: how long the pairs' connections may take once every rank has
  // arrived (0: 5 x `timeout`, Gloo's own). When set, the ranks first meet in
  // the store (each sets `<key_prefix>gloo-arrived/<rank>` and waits for the
  // others' under `timeout`: a get the store's watch may end at a drop), so
  // that the connections start together and only a member that died after
  // arriving is waited for this long. Every store wait keeps `timeout`.
  std::chrono::milliseconds connect_timeout{0};
};

bool gloo_compiled_in();
bool nccl_compiled_in();

// "gloo" or "nccl" for collective.backend `requested` ("auto" | "gloo" |
// "nccl"); `model_device` names where the model runs (the backend's name,
// for messages).
std::string resolve_collective_backend(const std::string& requested, bool model_on_cuda,
                                       const std::string& model_device);

// Builds backend `backend` ("gloo" | "nccl") and completes its rendezvous
// through `store` (every rank must call this; blocks at most options.timeout).
std::unique_ptr<Collective> make_collective(const std::string& backend, const CollectiveOptions& options,
                                            RendezvousStore& store);

}  // namespace pstrain
