// The CPU convolution for the 16-bit types oneDNN cannot run here: widen to
// f32, run the f32 kernels, round the result once.
//
// oneDNN 2.6 has no f16 convolution on CPUs without AVX512-FP16, and no bf16
// one on CPUs without AVX-512 (AVX2 only: runs_bf16(), onednn_common.h), so those
// are computed in f32 — the same accumulation oneDNN's bf16 kernels and
// cuDNN's f16 ones use (f32 compute), at the cost of two conversions and
// twice the memory of the operands. The f32 kernels are looked up at each
// call (through local_conv_kernels), not at registration, so replacing them
// carries over and the order of static registrars does not matter.
#include "backends/onednn/onednn_conv.h"
#include "dtensor/ops/local_conv.h"

namespace dtensor::onednn {
namespace {

LocalConvKernels f32(const Tensor& t) {
  return LocalConvKernels(t.device().type, DType::F32);
}
Tensor widen(const Tensor& t) {
  return t.defined() ? t.to(DType::F32) : t;
}

// Registration only; the f32 kernels are found when a convolution runs.
const bool registered = [] {
  kernels::register_dense_conv_kernels(DeviceType::CPU, DType::F16,
                                       widened_conv_passes(DType::F16));
  return true;
}();

}  // namespace

kernels::DenseConvPasses widened_conv_passes(DType narrow) {
  const auto round = [narrow](const Tensor& t) { return t.defined() ? t.to(narrow) : t; };
  kernels::DenseConvPasses passes;
  passes.forward = [round](const Tensor& x, const Tensor& w, const Tensor& b, const ConvParams& p) {
    return round(f32(x).forward(widen(x), widen(w), widen(b), p));
  };
  passes.backward_data = [round](const Tensor& grad_out, const Tensor& w, const Shape& input_shape,
                                 const ConvParams& p) {
    return round(f32(grad_out).backward_data(widen(grad_out), widen(w), input_shape, p));
  };
  passes.backward_weights = [round](const Tensor& grad_out, const Tensor& x,
                                    const Shape& weight_shape, const ConvParams& p,
                                    bool want_bias) {
    const ConvWeightGrads g =
        f32(x).backward_weights(widen(grad_out), widen(x), weight_shape, p, want_bias);
    return ConvWeightGrads{round(g.grad_weight), round(g.grad_bias)};
  };
  return passes;
}

}  // namespace dtensor::onednn
