#include "worker/nn/cuda/cudnn_conv.h"

#include <algorithm>
#include <string>

#include "common/base/errors.h"
#include "worker/nn/cuda/device_buffer.h"

namespace pstrain::nn::cuda {
namespace {

// The most workspace one convolution may ask for; algorithms that want more are passed over.
constexpr std::size_t kWorkspaceLimit = std::size_t{512} << 20;

void check(cudnnStatus_t status, const char* what) {
  if (status != CUDNN_STATUS_SUCCESS) throw ComputeError(std::string(what) + ": " + cudnnGetErrorString(status));
}

std::string version_text(std::size_t v) {
  return std::to_string(v / 10000) + "." + std::to_string(v % 10000 / 100) + "." + std::to_string(v % 100);
}

bool tensor_core_math(cudnnMathType_t m) { return m == CUDNN_TENSOR_OP_MATH || m == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION; }

// The first (best ranked) algorithm that works, fits kWorkspaceLimit and keeps to the precision,
// a deterministic one if any is.
template <typename Perf>
const Perf* pick(const Perf* perf, int count, bool fp32) {
  const Perf* fallback = nullptr;
  for (int i = 0; i < count; ++i) {
    const Perf& p = perf[i];
    if (p.status != CUDNN_STATUS_SUCCESS || p.memory > kWorkspaceLimit) continue;
    if (fp32 && tensor_core_math(p.mathType)) continue;
    if (p.determinism == CUDNN_DETERMINISTIC) return &p;
    if (fallback == nullptr) fallback = &p;
  }
  return fallback;
}

}  // namespace

std::string CudnnVersion::text() const {
  std::string out = "cuDNN " + version_text(loaded);
  if (loaded != built) out += " (built with " + version_text(built) + ")";
  return out;
}

CudnnVersion cudnn_version() { return {cudnnGetVersion(), static_cast<std::size_t>(CUDNN_VERSION)}; }

struct CudnnConv::Plan {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr, bias = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnActivationDescriptor_t relu = nullptr;  // made at the first forward_relu
  bool fused_unsupported = false;              // forward_relu found cuDNN refusing this shape
  cudnnConvolutionDescriptor_t conv = nullptr;
  cudnnConvolutionFwdAlgo_t fwd{};
  cudnnConvolutionBwdDataAlgo_t bwd_data{};
  cudnnConvolutionBwdFilterAlgo_t bwd_filter{};
  std::size_t fwd_bytes = 0, bwd_data_bytes = 0, bwd_filter_bytes = 0;

  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {
    for (cudnnTensorDescriptor_t t : {x, y, bias}) {
      if (t != nullptr) static_cast<void>(cudnnDestroyTensorDescriptor(t));
    }
    if (w != nullptr) static_cast<void>(cudnnDestroyFilterDescriptor(w));
    if (relu != nullptr) static_cast<void>(cudnnDestroyActivationDescriptor(relu));
    if (conv != nullptr) static_cast<void>(cudnnDestroyConvolutionDescriptor(conv));
  }
};

CudnnConv::CudnnConv(cudaStream_t stream, Math math) : stream_(stream), math_(math) {
  check(cudnnCreate(&handle_), "cudnnCreate");
  const cudnnStatus_t bound = cudnnSetStream(handle_, stream_);
  if (bound != CUDNN_STATUS_SUCCESS) {
    static_cast<void>(cudnnDestroy(handle_));
    check(bound, "cudnnSetStream");
  }
}

CudnnConv::~CudnnConv() {
  plans_.clear();
  if (handle_ != nullptr) static_cast<void>(cudnnDestroy(handle_));
}

CudnnConv::Plan& CudnnConv::plan(const Conv2dShape& s) {
  const Key key{s.n, s.c_in, s.h, s.w, s.c_out, s.k_h, s.k_w, s.stride, s.pad};
  if (auto found = plans_.find(key); found != plans_.end()) return *found->second;
  auto p = std::make_unique<Plan>();
  check(cudnnCreateTensorDescriptor(&p->x), "cudnnCreateTensorDescriptor");
  check(cudnnCreateTensorDescriptor(&p->y), "cudnnCreateTensorDescriptor");
  check(cudnnCreateTensorDescriptor(&p->bias), "cudnnCreateTensorDescriptor");
  check(cudnnCreateFilterDescriptor(&p->w), "cudnnCreateFilterDescriptor");
  check(cudnnCreateConvolutionDescriptor(&p->conv), "cudnnCreateConvolutionDescriptor");
  check(cudnnSetTensor4dDescriptor(p->x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, s.n, s.c_in, s.h, s.w),
        "conv2d (cudnn): input descriptor");
  check(cudnnSetTensor4dDescriptor(p->y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, s.n, s.c_out, s.out_h(), s.out_w()),
        "conv2d (cudnn): output descriptor");
  check(cudnnSetTensor4dDescriptor(p->bias, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, s.c_out, 1, 1),
        "conv2d (cudnn): bias descriptor");
  check(cudnnSetFilter4dDescriptor(p->w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, s.c_out, s.c_in, s.k_h, s.k_w),
        "conv2d (cudnn): filter descriptor");
  check(cudnnSetConvolution2dDescriptor(p->conv, s.pad, s.pad, s.stride, s.stride, 1, 1, CUDNN_CROSS_CORRELATION,
                                        CUDNN_DATA_FLOAT),
        "conv2d (cudnn): convolution descriptor");
  const bool fp32 = math_ == Math::kFp32;
  check(cudnnSetConvolutionMathType(p->conv, fp32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH),
        "conv2d (cudnn): math type");

  int n = 0;
  cudnnConvolutionFwdAlgoPerf_t fwd[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  check(cudnnGetConvolutionForwardAlgorithm_v7(handle_, p->x, p->w, p->conv, p->y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
                                               &n, fwd),
        "conv2d_forward: cudnnGetConvolutionForwardAlgorithm_v7");
  const auto* f = pick(fwd, n, fp32);
  cudnnConvolutionBwdDataAlgoPerf_t data[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
  check(cudnnGetConvolutionBackwardDataAlgorithm_v7(handle_, p->w, p->y, p->conv, p->x,
                                                    CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, data),
        "conv2d_backward: cudnnGetConvolutionBackwardDataAlgorithm_v7");
  const auto* d = pick(data, n, fp32);
  cudnnConvolutionBwdFilterAlgoPerf_t filter[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
  check(cudnnGetConvolutionBackwardFilterAlgorithm_v7(handle_, p->x, p->y, p->conv, p->w,
                                                      CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, filter),
        "conv2d_backward: cudnnGetConvolutionBackwardFilterAlgorithm_v7");
  const auto* g = pick(filter, n, fp32);
  if (f == nullptr || d == nullptr || g == nullptr) {
    throw ComputeError("conv2d (cudnn): no algorithm for this shape fits " + std::to_string(kWorkspaceLimit >> 20) +
                       " MiB of workspace" + (fp32 ? " in FP32 math" : ""));
  }
  p->fwd = f->algo;
  p->fwd_bytes = f->memory;
  p->bwd_data = d->algo;
  p->bwd_data_bytes = d->memory;
  p->bwd_filter = g->algo;
  p->bwd_filter_bytes = g->memory;
  return *plans_.emplace(key, std::move(p)).first->second;
}

void* CudnnConv::workspace_for(DeviceBuffer& workspace, std::size_t num_bytes, const char* op) {
  return num_bytes == 0 ? nullptr : workspace.reserve(num_bytes, stream_, op);
}

void CudnnConv::forward(const Conv2dShape& s, const float* x, const float* w, const float* b, float* y,
                        DeviceBuffer& workspace) {
  const Plan& p = plan(s);
  void* ws = workspace_for(workspace, p.fwd_bytes, "conv2d_forward (cudnn workspace)");
  const float one = 1.0f, zero = 0.0f;
  check(cudnnConvolutionForward(handle_, &one, p.x, x, p.w, w, p.conv, p.fwd, ws, p.fwd_bytes, &zero, p.y, y),
        "conv2d_forward: cudnnConvolutionForward");
  check(cudnnAddTensor(handle_, &one, p.bias, b, &one, p.y, y), "conv2d_forward: cudnnAddTensor (bias)");
}

bool CudnnConv::fuses(const Conv2dShape& s) { return !plan(s).fused_unsupported; }

bool CudnnConv::forward_relu(const Conv2dShape& s, const float* x, const float* w, const float* b, float* y,
                             DeviceBuffer& workspace) {
  Plan& p = plan(s);
  if (p.fused_unsupported) return false;
  const bool first = p.relu == nullptr;
  if (first) {
    check(cudnnCreateActivationDescriptor(&p.relu), "conv2d_relu_forward: cudnnCreateActivationDescriptor");
    // NaN to 0, as the own relu kernel (v > 0 ? v : 0) does.
    check(cudnnSetActivationDescriptor(p.relu, CUDNN_ACTIVATION_RELU, CUDNN_NOT_PROPAGATE_NAN, 0.0),
          "conv2d_relu_forward: cudnnSetActivationDescriptor");
  }
  void* ws = workspace_for(workspace, p.fwd_bytes, "conv2d_relu_forward (cudnn workspace)");
  const float one = 1.0f, zero = 0.0f;
  // The legacy fused call (deprecated in cuDNN 9 in favour of its graph API, present in every 9.x).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  const cudnnStatus_t status = cudnnConvolutionBiasActivationForward(
      handle_, &one, p.x, x, p.w, w, p.conv, p.fwd, ws, p.fwd_bytes, &zero, p.y, y, p.bias, b, p.relu, p.y, y);
#pragma GCC diagnostic pop
  if (status == CUDNN_STATUS_SUCCESS) return true;
  if (!first) check(status, "conv2d_relu_forward: cudnnConvolutionBiasActivationForward");
  p.fused_unsupported = true;  // e.g. CUDNN_STATUS_NOT_SUPPORTED for this algorithm: unfused from now on
  return false;
}

void CudnnConv::backward(const Conv2dShape& s, const float* x, const float* w, const float* dy, float* dx, float* dw,
                         float* db, DeviceBuffer& workspace) {
  const Plan& p = plan(s);
  const std::size_t bytes = std::max(p.bwd_filter_bytes, dx != nullptr ? p.bwd_data_bytes : std::size_t{0});
  void* ws = workspace_for(workspace, bytes, "conv2d_backward (cudnn workspace)");
  const float one = 1.0f, zero = 0.0f;
  check(cudnnConvolutionBackwardBias(handle_, &one, p.y, dy, &zero, p.bias, db),
        "conv2d_backward: cudnnConvolutionBackwardBias");
  check(cudnnConvolutionBackwardFilter(handle_, &one, p.x, x, p.y, dy, p.conv, p.bwd_filter, ws, p.bwd_filter_bytes,
                                       &zero, p.w, dw),
        "conv2d_backward: cudnnConvolutionBackwardFilter");
  if (dx == nullptr) return;
  check(cudnnConvolutionBackwardData(handle_, &one, p.w, w, p.y, dy, p.conv, p.bwd_data, ws, p.bwd_data_bytes, &zero,
                                     p.x, dx),
        "conv2d_backward: cudnnConvolutionBackwardData");
}

std::string CudnnConv::algorithms(const Conv2dShape& s) {
  const Plan& p = plan(s);
  return "cudnn fwd " + std::to_string(static_cast<int>(p.fwd)) + ", bwd-data " +
         std::to_string(static_cast<int>(p.bwd_data)) + ", bwd-filter " +
         std::to_string(static_cast<int>(p.bwd_filter));
}

}  // namespace pstrain::nn::cuda
