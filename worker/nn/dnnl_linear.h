// A fully connected layer of one fixed shape on oneDNN inner-product
// primitives (forward with bias, backward-data, backward-weights with bias),
// all on plain layouts: x [n, in], w [out, in], b [out], y [n, out]. oneDNN
// runs these as its own JIT GEMM, which measured as fast as OpenBLAS SGEMM
// here and keeps all threading inside one OpenMP pool (mixing OpenBLAS's
// spinning pthreads with OpenMP's halves throughput on 2 cores).
// Backward primitives are built on first use. Not thread-safe.
#pragma once

#include <dnnl.hpp>

#include "worker/nn/backend.h"

namespace pstrain::nn {

class DnnlLinear {
 public:
  DnnlLinear(const dnnl::engine& engine, const LinearShape& shape);

  void forward(dnnl::stream& stream, const float* x, const float* w, const float* b, float* y);
  // dx may be null (skipped); dw, db overwritten.
  void backward(dnnl::stream& stream, const float* x, const float* w, const float* dy, float* dx,
                float* dw, float* db);

 private:
  void build_backward();

  dnnl::engine engine_;
  dnnl::memory::desc x_md_, w_md_, b_md_, y_md_;
  dnnl::inner_product_forward::primitive_desc fwd_pd_;
  dnnl::inner_product_forward fwd_;
  bool have_bwd_ = false;
  dnnl::inner_product_backward_data bwd_data_;
  dnnl::inner_product_backward_weights bwd_weights_;
  // Caller-owned buffers, re-pointed on every call.
  dnnl::memory x_, w_, b_, y_, dx_, dw_, db_, dy_;
};

}  // namespace pstrain::nn
