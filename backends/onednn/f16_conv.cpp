// The CPU convolution for f16: widen to f32, run the f32 kernels, round the
// result to f16 once.
//
// oneDNN 2.6 has no f16 convolution on CPUs without AVX512-FP16 (this one
// included), so f16 is computed in f32 — the same accumulation cuDNN uses for
// f16 (CUDNN_DATA_HALF with f32 compute), at the cost of two conversions and
// twice the memory of the operands. The f32 kernels are looked up at each call
// (through local_conv_kernels), not at registration, so replacing them
// carries over to f16 and the order of static registrars does not matter.
#include "dtensor/ops/local_conv.h"

namespace dtensor::onednn {
namespace {

LocalConvKernels f32(const Tensor& t) {
  return LocalConvKernels(t.device().type, DType::F32);
}
Tensor widen(const Tensor& t) {
  return t.defined() ? t.to(DType::F32) : t;
}
Tensor round(const Tensor& t) {
  return t.defined() ? t.to(DType::F16) : t;
}

// Registration only; the f32 kernels are found when a convolution runs.
const bool registered = [] {
  kernels::DenseConvPasses passes;
  passes.forward = [](const Tensor& x, const Tensor& w, const Tensor& b, const ConvParams& p) {
    return round(f32(x).forward(widen(x), widen(w), widen(b), p));
  };
  passes.backward_data = [](const Tensor& grad_out, const Tensor& w, const Shape& input_shape,
                            const ConvParams& p) {
    return round(f32(grad_out).backward_data(widen(grad_out), widen(w), input_shape, p));
  };
  passes.backward_weights = [](const Tensor& grad_out, const Tensor& x, const Shape& weight_shape,
                               const ConvParams& p, bool want_bias) {
    const ConvWeightGrads g =
        f32(x).backward_weights(widen(grad_out), widen(x), weight_shape, p, want_bias);
    return ConvWeightGrads{round(g.grad_weight), round(g.grad_bias)};
  };
  kernels::register_dense_conv_kernels(DeviceType::CPU, DType::F16, std::move(passes));
  return true;
}();

}  // namespace
}  // namespace dtensor::onednn
