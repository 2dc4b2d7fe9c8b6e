// SGD and Adam updates, element-wise, with exactly the formulas of
// common/optimizer.h:
//   SGD:  g' = g + wd*w;  v = momentum*v + g';  d = nesterov ? g' + momentum*v : v;  w -= lr*d
//         (velocity null, allowed when momentum == 0: d = g')
//   Adam: g' = g + wd*w;  m = b1*m + (1-b1)*g';  v = b2*v + (1-b2)*g'^2;
//         w -= lr * (m / bc1) / (sqrt(v / bc2) + eps),  bc1 = 1-b1^t, bc2 = 1-b2^t
#include <cmath>

#include "worker/nn/cuda/cuda_check.h"
#include "worker/nn/cuda/kernels.cuh"
#include "worker/nn/cuda/launch_config.cuh"

namespace pstrain::nn::cuda {
namespace {

__global__ void sgd_kernel(float* w, float* velocity, const float* g, std::size_t num_elems, float lr,
                           float momentum, float weight_decay, bool nesterov) {
  for (std::size_t i = global_thread_index(); i < num_elems; i += grid_stride()) {
    const float grad = g[i] + weight_decay * w[i];
    float step = grad;
    if (velocity != nullptr) {
      const float v = momentum * velocity[i] + grad;
      velocity[i] = v;
      step = nesterov ? grad + momentum * v : v;
    }
    w[i] -= lr * step;
  }
}

struct AdamConstants {
  float lr, beta1, beta2, epsilon, weight_decay, bias_correction1, bias_correction2;
};

__global__ void adam_kernel(float* w, float* m, float* v, const float* g, std::size_t num_elems,
                            AdamConstants k) {
  for (std::size_t i = global_thread_index(); i < num_elems; i += grid_stride()) {
    const float grad = g[i] + k.weight_decay * w[i];
    const float m_i = k.beta1 * m[i] + (1.0f - k.beta1) * grad;
    const float v_i = k.beta2 * v[i] + (1.0f - k.beta2) * grad * grad;
    m[i] = m_i;
    v[i] = v_i;
    const float m_hat = m_i / k.bias_correction1;
    const float v_hat = v_i / k.bias_correction2;
    w[i] -= k.lr * m_hat / (sqrtf(v_hat) + k.epsilon);
  }
}

}  // namespace

void sgd_step(float* w, float* velocity, const float* g, std::size_t num_elems, const SgdParams& p,
              cudaStream_t stream) {
  if (num_elems == 0) return;
  sgd_kernel<<<grid_size(num_elems), kBlockSize, 0, stream>>>(w, velocity, g, num_elems, p.lr, p.momentum,
                                                              p.weight_decay, p.nesterov);
  check_launch("sgd_step");
}

void adam_step(float* w, float* m, float* v, const float* g, std::size_t num_elems, const AdamParams& p,
               float bias_correction1, float bias_correction2, cudaStream_t stream) {
  if (num_elems == 0) return;
  const AdamConstants k{p.lr,           p.beta1,          p.beta2,         p.epsilon,
                        p.weight_decay, bias_correction1, bias_correction2};
  adam_kernel<<<grid_size(num_elems), kBlockSize, 0, stream>>>(w, m, v, g, num_elems, k);
  check_launch("adam_step");
}

}  // namespace pstrain::nn::cuda
