// The CPU convolution for f16: widen to f32, run the f32 kernels, round the
// result to f16 once.
//
// oneDNN 2.6 has no f16 convolution on CPUs without AVX512-FP16 (this one
// included), so f16 is computed in f32 — the same accumulation cuDNN uses for
// f16 (CUDNN_DATA_HALF with f32 compute), at the cost of two conversions and
// twice the memory of the operands. The f32 kernels are looked up at each call,
// not at registration, so replacing them (register_local_conv_kernels) carries
// over to f16 and the order of static registrars does not matter.
#include <memory>

#include "dtensor/ops/local_conv.h"

namespace dtensor::onednn {
namespace {

class F16ViaF32ConvKernels final : public LocalConvKernels {
 public:
  std::string name() const override { return "f16-via-f32(" + f32(Device::cpu())->name() + ")"; }

 protected:
  static std::shared_ptr<LocalConvKernels> f32(Device d) {
    return local_conv_kernels(d, DType::F32);
  }
  static Tensor widen(const Tensor& t) { return t.defined() ? t.to(DType::F32) : t; }
  static Tensor round(const Tensor& t) { return t.defined() ? t.to(DType::F16) : t; }

  Tensor forward_impl(const Tensor& x, const Tensor& w, const Tensor& b,
                      const ConvParams& p) const override {
    return round(f32(x.device())->forward(widen(x), widen(w), widen(b), p));
  }
  Tensor backward_data_impl(const Tensor& grad_out, const Tensor& w, const Shape& input_shape,
                            const ConvParams& p) const override {
    return round(f32(grad_out.device())->backward_data(widen(grad_out), widen(w), input_shape, p));
  }
  ConvWeightGrads backward_weights_impl(const Tensor& grad_out, const Tensor& x,
                                        const Shape& weight_shape, const ConvParams& p,
                                        bool want_bias) const override {
    ConvWeightGrads g =
        f32(x.device())->backward_weights(widen(grad_out), widen(x), weight_shape, p, want_bias);
    return {round(g.grad_weight), round(g.grad_bias)};
  }
};

// Registration only; the f32 kernels are found when a convolution runs.
const bool registered = [] {
  register_local_conv_kernels(DeviceType::CPU, DType::F16,
                              std::make_shared<F16ViaF32ConvKernels>());
  return true;
}();

}  // namespace
}  // namespace dtensor::onednn
