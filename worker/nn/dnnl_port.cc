#include "worker/nn/dnnl_port.h"

namespace pstrain::nn {

DnnlPort::DnnlPort(const dnnl::engine& engine, const dnnl::memory::desc& plain,
                   const dnnl::memory::desc& wanted)
    : plain_(plain, engine, DNNL_MEMORY_NONE), reorders_(plain != wanted) {
  if (reorders_) {
    inner_ = dnnl::memory(wanted, engine);
    to_inner_ = dnnl::reorder(plain_, inner_);
    to_plain_ = dnnl::reorder(inner_, plain_);
  } else {
    inner_ = plain_;
  }
}

const dnnl::memory& DnnlPort::input(dnnl::stream& stream, const float* data) {
  // oneDNN only reads inputs; its API takes a non-const handle.
  plain_.set_data_handle(const_cast<float*>(data));
  if (reorders_) to_inner_.execute(stream, plain_, inner_);
  return inner_;
}

const dnnl::memory& DnnlPort::output(float* data) {
  plain_.set_data_handle(data);
  return inner_;
}

void DnnlPort::finish_output(dnnl::stream& stream) {
  if (reorders_) to_plain_.execute(stream, inner_, plain_);
}

}  // namespace pstrain::nn
