// oneDNN as the CPU convolution for f32 and bf16: its three passes in the
// conv.* kernel slots, registered when the library loads. bf16 runs in
// oneDNN where oneDNN can (AVX-512), else widened to f32 (widened_conv.cpp):
// asked on the first bf16 convolution, as loading creates no oneDNN object.
#include <fmt/format.h>

#include <utility>

#include "backends/onednn/onednn_conv.h"
#include "dtensor/core/errors.h"
#include "dtensor/ops/kernels/conv.h"

namespace dtensor::onednn {
namespace {

// dnnl::error escaping execution (not creation, which the passes translate)
// becomes a dtensor::Error so callers only ever see the library's types.
template <typename F>
void guarded(const char* pass, F&& f) {
  try {
    f();
  } catch (const dnnl::error& e) {
    throw Error("onednn", fmt::format("convolution {}: {}", pass, e.what()));
  }
}

void forward(const kernels::ConvForwardArgs& a) {
  guarded("forward", [&] { conv_forward_into(a.input, a.weight, a.bias, a.params, a.output); });
}
void backward_data(const kernels::ConvBackwardDataArgs& a) {
  guarded("backward_data",
          [&] { conv_backward_data(a.grad_output, a.weight, a.grad_input, a.params); });
}
void backward_weights(const kernels::ConvBackwardWeightsArgs& a) {
  guarded("backward_weights", [&] {
    conv_backward_weights(a.grad_output, a.input, a.params, {a.grad_weight, a.grad_bias});
  });
}

// bf16: oneDNN's pass where oneDNN runs bf16 on this CPU, else the widened one.
template <typename Args>
KernelFunction<Args> bf16_pass(void (*native)(const Args&), KernelFunction<Args> widened) {
  return [native, widened = std::move(widened)](const Args& a) {
    runs_bf16() ? native(a) : widened(a);
  };
}

// Runs when the shared object loads. It creates no oneDNN object (the engine
// comes on first use), so loading the library stays fork-safe.
const bool registered = [] {
  register_kernel(kernels::kConvForward, DeviceType::CPU, DType::F32,
                  KernelFunction<kernels::ConvForwardArgs>(forward));
  register_kernel(kernels::kConvBackwardData, DeviceType::CPU, DType::F32,
                  KernelFunction<kernels::ConvBackwardDataArgs>(backward_data));
  register_kernel(kernels::kConvBackwardWeights, DeviceType::CPU, DType::F32,
                  KernelFunction<kernels::ConvBackwardWeightsArgs>(backward_weights));
  kernels::DenseConvKernels widened = kernels::dense_conv_kernels(widened_conv_passes(DType::BF16));
  register_kernel(kernels::kConvForward, DeviceType::CPU, DType::BF16,
                  bf16_pass(forward, std::move(widened.forward)));
  register_kernel(kernels::kConvBackwardData, DeviceType::CPU, DType::BF16,
                  bf16_pass(backward_data, std::move(widened.backward_data)));
  register_kernel(kernels::kConvBackwardWeights, DeviceType::CPU, DType::BF16,
                  bf16_pass(backward_weights, std::move(widened.backward_weights)));
  return true;
}();

}  // namespace
}  // namespace dtensor::onednn
