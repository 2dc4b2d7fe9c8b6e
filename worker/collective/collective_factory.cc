#include "worker/collective/collective_factory.h"

#include "common/base/errors.h"

#if defined(PSTRAIN_HAVE_GLOO)
#include "worker/collective/gloo_collective.h"
#endif
#if defined(PSTRAIN_HAVE_NCCL)
#include "worker/collective/nccl_collective.h"
#endif

namespace pstrain {
namespace {

void check_options(const CollectiveOptions& o) {
  if (o.size < 1 || o.rank < 0 || o.rank >= o.size) {
    throw ConfigError("collective: rank " + std::to_string(o.rank) + " of " + std::to_string(o.size) +
                      " ranks: expected size >= 1 and 0 <= rank < size");
  }
  if (o.timeout.count() < 1) {
    throw ConfigError("collective: timeout of " + std::to_string(o.timeout.count()) + " ms, expected >= 1");
  }
}

}  // namespace

bool gloo_compiled_in() {
#if defined(PSTRAIN_HAVE_GLOO)
  return true;
#else
  return false;
#endif
}

bool nccl_compiled_in() {
#if defined(PSTRAIN_HAVE_NCCL)
  return true;
#else
  return false;
#endif
}

std::string resolve_collective_backend(const std::string& requested, bool model_on_cuda,
                                       const std::string& model_device) {
  const std::string key = "collective.backend \"" + requested + "\"";
  if (requested != "auto" && requested != "gloo" && requested != "nccl") {
    throw ConfigError(key + ": unknown, expected \"auto\", \"gloo\" or \"nccl\"");
  }
  const bool want_nccl = requested == "nccl" || (requested == "auto" && model_on_cuda && nccl_compiled_in());
  if (want_nccl) {
    if (!nccl_compiled_in()) {
      throw ConfigError(key + ": pstrain was built without NCCL (it needs the CUDA toolkit's nccl.h and libnccl "
                              "when cmake runs); use \"gloo\"");
    }
    if (!model_on_cuda) {
      throw ConfigError(key + ": NCCL reduces GPU memory, but this worker's model runs on " + model_device +
                        " (no usable CUDA device); use \"gloo\" or \"auto\"");
    }
    return "nccl";
  }
  if (!gloo_compiled_in()) {
    throw ConfigError(key + ": Gloo is needed for a model on " + model_device +
                      ", but pstrain was built without it (install libgloo-dev and re-run cmake)");
  }
  return "gloo";
}

std::unique_ptr<Collective> make_collective(const std::string& backend, const CollectiveOptions& options,
                                            RendezvousStore& store) {
  check_options(options);
#if defined(PSTRAIN_HAVE_GLOO)
  if (backend == "gloo") return make_gloo_collective(options, store);
#endif
#if defined(PSTRAIN_HAVE_NCCL)
  if (backend == "nccl") return make_nccl_collective(options, store);
#endif
  (void)store;
  throw ConfigError("collective backend '" + backend + "': not available in this build (gloo " +
                    (gloo_compiled_in() ? "yes" : "no") + ", nccl " + (nccl_compiled_in() ? "yes" : "no") + ")");
}

}  // namespace pstrain
