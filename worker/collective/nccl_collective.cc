#include "worker/collective/nccl_collective.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <exception>
#include <thread>

#include "common/base/errors.h"

namespace pstrain {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

class NcclCollective final : public Collective {
 public:
  NcclCollective(const CollectiveOptions& options, RendezvousStore& store) : options_(options) {
    try {
      select_device();
      const ncclUniqueId id = exchange_unique_id(store);
      check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
      check_cuda(cudaMalloc(&scratch_, sizeof(float)), "cudaMalloc of the barrier's float");
      ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
      config.blocking = 0;  // init and operations return at once; await() bounds every wait
      check_nccl(ncclCommInitRankConfig(&comm_, options.size, id, options.rank, &config), "ncclCommInitRankConfig");
      await("communicator init", Clock::now() + options.timeout);
    } catch (...) {
      if (!failure_) failure_ = std::current_exception();
      release();
      throw;
    }
  }

  ~NcclCollective() override { release(); }

  std::string name() const override {
    int version = 0;
    ncclGetVersion(&version);
    return "nccl " + std::to_string(version / 10000) + "." + std::to_string(version / 100 % 100) + " (cuda:" +
           std::to_string(options_.cuda_device) + ")";
  }
  int rank() const override { return options_.rank; }
  int size() const override { return options_.size; }
  bool device_memory() const override { return true; }

  void start_allreduce_mean(float* data, std::size_t num_elems) override {
    if (num_elems == 0) return;
    const std::string op = "allreduce of " + std::to_string(num_elems) + " floats";
    enqueue(op, [&] { return ncclAllReduce(data, data, num_elems, ncclFloat, ncclAvg, comm_, stream_); });
  }

  bool wait_all(milliseconds timeout) override {
    rethrow_failure();
    if (!pending_) return true;
    check_cuda(cudaSetDevice(options_.cuda_device), "cudaSetDevice");
    const auto until = Clock::now() + timeout;
    while (true) {
      const cudaError_t done = cudaStreamQuery(stream_);
      if (done == cudaSuccess) {
        pending_ = false;
        return true;
      }
      if (done != cudaErrorNotReady) fail<TransportError>(where("wait") + ": " + cudaGetErrorString(done));
      ncclResult_t state = ncclSuccess;
      ncclCommGetAsyncError(comm_, &state);
      if (state != ncclSuccess && state != ncclInProgress) fail<TransportError>(where("wait") + ": " + nccl_text(state));
      if (Clock::now() > op_deadline_) {
        fail<TimeoutError>(where("wait") + ": operations still running after " +
                           std::to_string(options_.timeout.count()) + " ms (a peer failed or is stuck)");
      }
      if (Clock::now() > until) return false;
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  void broadcast(float* data, std::size_t num_elems, int root) override {
    if (root < 0 || root >= options_.size) {
      throw ConfigError(where("broadcast") + ": root " + std::to_string(root) + " outside [0, " +
                        std::to_string(options_.size) + ")");
    }
    if (num_elems == 0) return;
    const std::string op = "broadcast of " + std::to_string(num_elems) + " floats from rank " + std::to_string(root);
    enqueue(op, [&] { return ncclBroadcast(data, data, num_elems, ncclFloat, root, comm_, stream_); });
    wait_until_done();
  }

  void barrier() override {
    enqueue("barrier", [&] { return ncclAllReduce(scratch_, scratch_, 1, ncclFloat, ncclSum, comm_, stream_); });
    wait_until_done();
  }

 private:
  // Destroys the communicator (aborts it after a failure) and frees the stream and scratch.
  void release() noexcept {
    cudaSetDevice(options_.cuda_device);
    if (comm_ != nullptr) {
      const ncclResult_t finalize = failure_ ? ncclInternalError : ncclCommFinalize(comm_);
      ncclResult_t state = finalize == ncclSuccess || finalize == ncclInProgress ? ncclInProgress : finalize;
      const auto deadline = Clock::now() + options_.timeout;
      while (state == ncclInProgress && Clock::now() < deadline) {
        if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess) break;
        if (state == ncclInProgress) std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
      if (state == ncclSuccess) {
        ncclCommDestroy(comm_);
      } else {
        ncclCommAbort(comm_);
      }
      comm_ = nullptr;
    }
    if (scratch_ != nullptr) cudaFree(scratch_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    scratch_ = nullptr;
    stream_ = nullptr;
  }

  std::string where(const std::string& op) const {
    return "nccl " + op + " (rank " + std::to_string(options_.rank) + " of " + std::to_string(options_.size) +
           ", cuda:" + std::to_string(options_.cuda_device) + ")";
  }

  std::string nccl_text(ncclResult_t result) const {
    std::string text = ncclGetErrorString(result);
    const char* last = comm_ != nullptr ? ncclGetLastError(comm_) : nullptr;
    if (last != nullptr && *last != '\0') text += std::string(": ") + last;
    return text;
  }

  void select_device() {
    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count == 0) {
      throw ConfigError(where("setup") + ": no CUDA device (cudaGetDeviceCount: " +
                        (err != cudaSuccess ? std::string(cudaGetErrorString(err)) : std::string("0 devices")) +
                        "); NCCL needs one GPU per worker, use collective.backend = \"gloo\"");
    }
    if (options_.cuda_device < 0 || options_.cuda_device >= count) {
      throw ConfigError(where("setup") + ": this machine has " + std::to_string(count) +
                        " CUDA device(s); NCCL needs one GPU per worker");
    }
    check_cuda(cudaSetDevice(options_.cuda_device), "cudaSetDevice");
  }

  // Rank 0 creates the id and publishes it; the others fetch it.
  ncclUniqueId exchange_unique_id(RendezvousStore& store) {
    ncclUniqueId id{};
    const std::string key = options_.key_prefix + "nccl/unique_id";
    if (options_.rank == 0) {
      check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
      store.set(key, std::string(id.internal, sizeof(id.internal)));
      return id;
    }
    const std::string bytes = store.get(key, options_.timeout);
    if (bytes.size() != sizeof(id.internal)) {
      throw ProtocolError(where("setup") + ": unique id from the store has " + std::to_string(bytes.size()) +
                          " bytes, expected " + std::to_string(sizeof(id.internal)));
    }
    std::copy(bytes.begin(), bytes.end(), id.internal);
    return id;
  }

  // Issues one NCCL call on the stream and waits until the non-blocking
  // communicator has taken it.
  template <class F>
  void enqueue(const std::string& op, F call) {
    rethrow_failure();
    check_cuda(cudaSetDevice(options_.cuda_device), "cudaSetDevice");
    check_nccl(call(), op);
    await(op, Clock::now() + options_.timeout);
    op_deadline_ = Clock::now() + options_.timeout;  // the last operation started must finish by then
    pending_ = true;
  }

  void wait_until_done() {
    while (!wait_all(milliseconds(1000))) {
    }
  }

  // Polls the communicator while it reports ncclInProgress.
  void await(const std::string& op, Clock::time_point deadline) {
    ncclResult_t state = ncclInProgress;
    while (true) {
      check_nccl(ncclCommGetAsyncError(comm_, &state), op + " (state query)");
      if (state == ncclSuccess) return;
      if (state != ncclInProgress) fail<TransportError>(where(op) + ": " + nccl_text(state));
      if (Clock::now() > deadline) {
        fail<TimeoutError>(where(op) + ": not done within " + std::to_string(options_.timeout.count()) +
                           " ms (are all ranks running?)");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }

  void check_nccl(ncclResult_t result, const std::string& op) {
    if (result != ncclSuccess && result != ncclInProgress) fail<TransportError>(where(op) + ": " + nccl_text(result));
  }

  void check_cuda(cudaError_t result, const std::string& op) {
    if (result != cudaSuccess) fail<TransportError>(where(op) + ": " + cudaGetErrorString(result));
  }

  // Records the failure (every later call rethrows it) and throws it.
  template <class E>
  [[noreturn]] void fail(const std::string& message) {
    failure_ = std::make_exception_ptr(E(message));
    std::rethrow_exception(failure_);
  }

  void rethrow_failure() const {
    if (failure_) std::rethrow_exception(failure_);
  }

  CollectiveOptions options_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  float* scratch_ = nullptr;
  bool pending_ = false;
  Clock::time_point op_deadline_;
  std::exception_ptr failure_;
};

}  // namespace

std::unique_ptr<Collective> make_nccl_collective(const CollectiveOptions& options, RendezvousStore& store) {
  return std::make_unique<NcclCollective>(options, store);
}

}  // namespace pstrain
