// oneDNN as the CPU convolution for f32 and bf16, registered when the library loads.
#include <memory>

#include <fmt/format.h>

#include "backends/onednn/onednn_conv.h"
#include "dtensor/core/errors.h"

namespace dtensor::onednn {
namespace {

class OneDnnConvKernels final : public LocalConvKernels {
 public:
  std::string name() const override { return "onednn"; }

 protected:
  // dnnl::error escaping execution (not creation, which the passes translate)
  // becomes a dtensor::Error so callers only ever see the library's types.
  template <typename F>
  static auto guarded(const char* pass, F&& f) {
    try {
      return f();
    } catch (const dnnl::error& e) {
      throw Error("onednn", fmt::format("convolution {}: {}", pass, e.what()));
    }
  }

  Tensor forward_impl(const Tensor& x, const Tensor& w, const Tensor& b,
                      const ConvParams& p) const override {
    return guarded("forward", [&] { return conv_forward(x, w, b, p); });
  }
  Tensor backward_data_impl(const Tensor& grad_out, const Tensor& w, const Shape& input_shape,
                            const ConvParams& p) const override {
    return guarded("backward_data",
                   [&] { return conv_backward_data(grad_out, w, input_shape, p); });
  }
  ConvWeightGrads backward_weights_impl(const Tensor& grad_out, const Tensor& x,
                                        const Shape& weight_shape, const ConvParams& p,
                                        bool want_bias) const override {
    return guarded("backward_weights",
                   [&] { return conv_backward_weights(grad_out, x, weight_shape, p, want_bias); });
  }
  Tensor forward_tiled_impl(const TiledTensor& x, const Tensor& w, const Tensor& b,
                            const ConvParams& p) const override {
    return guarded("forward", [&] { return conv_forward(x, w, b, p); });
  }
  void forward_into_impl(const TiledTensor& x, const Tensor& w, const Tensor& b,
                         const ConvParams& p, const Tensor& out) const override {
    guarded("forward", [&] { conv_forward_into(x, w, b, p, out); });
  }
  void backward_data_tiled_impl(const Tensor& grad_out, const Tensor& w,
                                const TiledTensor& grad_input, const ConvParams& p) const override {
    guarded("backward_data", [&] { conv_backward_data(grad_out, w, grad_input, p); });
  }
  ConvWeightGrads backward_weights_tiled_impl(const Tensor& grad_out, const TiledTensor& x,
                                              const Shape& weight_shape, const ConvParams& p,
                                              bool want_bias) const override {
    return guarded("backward_weights",
                   [&] { return conv_backward_weights(grad_out, x, weight_shape, p, want_bias); });
  }
};

// Runs when the shared object loads. It creates no oneDNN object (the engine
// comes on first use), so loading the library stays fork-safe.
const bool registered = [] {
  auto k = std::make_shared<OneDnnConvKernels>();
  register_local_conv_kernels(DeviceType::CPU, DType::F32, k);
  register_local_conv_kernels(DeviceType::CPU, DType::BF16, k);
  return true;
}();

}  // namespace
}  // namespace dtensor::onednn
