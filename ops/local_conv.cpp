#include "dtensor/ops/local_conv.h"

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "dtensor/core/errors.h"
#include "dtensor/ops/kernels/channel.h"

namespace dtensor {
namespace {

constexpr const char* kComponent = "conv";

void check_operand(const Tensor& t, const char* name) {
  check_arg(t.defined(), kComponent, "{}: undefined tensor", name);
}

void check_same_kind(const Tensor& a, const char* an, const Tensor& b, const char* bn) {
  DTENSOR_CHECK_ARG(a.dtype() == b.dtype(), kComponent, "{}: dtype {} differs from the {}'s {}", bn,
                    dtype_name(b.dtype()), an, dtype_name(a.dtype()));
  DTENSOR_CHECK_ARG(a.device() == b.device(), kComponent, "{}: on {} but the {} is on {}", bn,
                    b.device().str(), an, a.device().str());
}

std::optional<Shape> bias_shape(const Tensor& b) {
  return b.defined() ? std::optional<Shape>(b.shape()) : std::nullopt;
}

Shape output_shape(const Shape& input, const Shape& weight, const ConvParams& p) {
  Shape out{input[0], weight[0]};
  for (std::size_t i = 0; i < p.stride.size(); ++i)
    out.push_back(conv_output_length(input[2 + i], weight[2 + i], p.stride[i], p.dilation[i],
                                     p.padding[i].first, p.padding[i].second));
  return out;
}

// Sum of grad_out over every dim but the channels: the bias gradient, for the
// degenerate cases the backends never see (the channel.sums kernel, in f64).
Tensor bias_grad(DeviceType device, const Tensor& grad_out) {
  const Tensor g = grad_out.contiguous();
  Tensor sums = Tensor::empty({g.size(1)}, DType::F64);
  run_kernel(kernels::kChannelSums, device, g.dtype(), kernels::ChannelSumsArgs{g, sums});
  return sums.to(grad_out.dtype()).to(grad_out.device());
}

// The parameters, expanded and checked, for a pass that reads grad_output.
ConvParams check_grad_output(const Tensor& grad_out, const Shape& input_shape,
                             const Shape& weight_shape, const ConvParams& params) {
  ConvParams p = check_conv_args(input_shape, weight_shape, std::nullopt, params);
  const Shape out_shape = output_shape(input_shape, weight_shape, p);
  DTENSOR_CHECK_ARG(grad_out.shape() == out_shape, kComponent,
                    "grad_output: shape {} does not match the convolution's output shape {}",
                    shape_str(grad_out.shape()), shape_str(out_shape));
  return p;
}

// The kernels of (device, dtype) on `args`, whose operands must be of that
// dtype. The device is the front's, not the operands': a backend that runs
// one device's kernels on memory it presents as another's (a staging test's
// fake device) asks for them by name.
template <typename Args>
void run_pass(const KernelSlot<Args>& slot, DeviceType device, DType dtype, DType operand,
              const char* operand_name, const Args& args) {
  DTENSOR_CHECK_ARG(operand == dtype, kComponent,
                    "{}: dtype {} but these are the {} {} "
                    "kernels",
                    operand_name, dtype_name(operand), device_type_name(device), dtype_name(dtype));
  run_kernel(slot, device, dtype, args);
}

// The output of a forward pass that no data reaches (empty shard, window
// wholly in padding): the bias alone.
Tensor bias_only_output(DeviceType device, const Shape& out_shape, const Tensor& x,
                        const Tensor& b) {
  Tensor y = Tensor::zeros(out_shape, x.dtype(), x.device());
  if (b.defined() && y.numel() > 0)
    run_kernel(kernels::kChannelBias, device, y.dtype(),
               kernels::ChannelBiasArgs{y, b.contiguous()});
  return y;
}

// The dense backward-weights pass into fresh outputs of the input's dtype.
ConvWeightGrads run_backward_weights(DeviceType device, DType dtype, const Tensor& grad_out,
                                     const TiledTensor& x, const Shape& weight_shape,
                                     const ConvParams& p, bool want_bias) {
  ConvWeightGrads g;
  g.grad_weight = Tensor::empty(weight_shape, x.dtype(), x.device());
  if (want_bias) g.grad_bias = Tensor::empty({weight_shape[0]}, x.dtype(), x.device());
  run_pass(
      kernels::kConvBackwardWeights, device, dtype, x.dtype(), "input",
      kernels::ConvBackwardWeightsArgs{grad_out.contiguous(), x, p, g.grad_weight, g.grad_bias});
  return g;
}

}  // namespace

Tensor LocalConvKernels::forward(const Tensor& x, const Tensor& w, const Tensor& b,
                                 const ConvParams& params) const {
  check_operand(x, "input");
  check_operand(w, "weight");
  check_same_kind(x, "input", w, "weight");
  if (b.defined()) check_same_kind(x, "input", b, "bias");
  const ConvParams p = check_conv_args(x.shape(), w.shape(), bias_shape(b), params);
  const Shape out_shape = output_shape(x.shape(), w.shape(), p);
  if (x.numel() == 0 || w.numel() == 0 || shape_numel(out_shape) == 0)
    return bias_only_output(device_, out_shape, x, b);
  Tensor y = Tensor::empty(out_shape, x.dtype(), x.device());
  run_pass(kernels::kConvForward, device_, dtype_, x.dtype(), "input",
           kernels::ConvForwardArgs{TiledTensor::whole(x.contiguous()), w.contiguous(),
                                    b.defined() ? b.contiguous() : Tensor(), p, y});
  return y;
}

Tensor LocalConvKernels::backward_data(const Tensor& grad_out, const Tensor& w,
                                       const Shape& input_shape, const ConvParams& params) const {
  check_operand(grad_out, "grad_output");
  check_operand(w, "weight");
  check_same_kind(grad_out, "grad_output", w, "weight");
  const ConvParams p = check_grad_output(grad_out, input_shape, w.shape(), params);
  if (shape_numel(input_shape) == 0 || w.numel() == 0 || grad_out.numel() == 0)
    return Tensor::zeros(input_shape, grad_out.dtype(), grad_out.device());
  Tensor gx = Tensor::empty(input_shape, grad_out.dtype(), grad_out.device());
  run_pass(kernels::kConvBackwardData, device_, dtype_, grad_out.dtype(), "grad_output",
           kernels::ConvBackwardDataArgs{grad_out.contiguous(), w.contiguous(), p,
                                         TiledTensor::whole(gx)});
  return gx;
}

ConvWeightGrads LocalConvKernels::backward_weights(const Tensor& grad_out, const Tensor& x,
                                                   const Shape& weight_shape,
                                                   const ConvParams& params, bool want_bias) const {
  check_operand(grad_out, "grad_output");
  check_operand(x, "input");
  check_same_kind(x, "input", grad_out, "grad_output");
  const ConvParams p = check_grad_output(grad_out, x.shape(), weight_shape, params);
  if (x.numel() == 0 || shape_numel(weight_shape) == 0 || grad_out.numel() == 0) {
    ConvWeightGrads g;
    g.grad_weight = Tensor::zeros(weight_shape, x.dtype(), x.device());
    if (want_bias) g.grad_bias = bias_grad(device_, grad_out);
    return g;
  }
  return run_backward_weights(device_, dtype_, grad_out, TiledTensor::whole(x.contiguous()),
                              weight_shape, p, want_bias);
}

namespace {

void check_tiles(const TiledTensor& x, const char* name, const Tensor& other,
                 const char* other_name) {
  DTENSOR_CHECK_ARG(x.dtype() == other.dtype(), kComponent, "{}: dtype {} differs from the {}'s {}",
                    other_name, dtype_name(other.dtype()), name, dtype_name(x.dtype()));
  DTENSOR_CHECK_ARG(x.device() == other.device(), kComponent, "{}: on {} but the {} is on {}",
                    other_name, other.device().str(), name, x.device().str());
}

void check_covers(const TiledTensor& x) {
  DTENSOR_CHECK_ARG(x.complete(), kComponent, "input: the tiles do not cover the shape {}",
                    shape_str(x.shape()));
}

// What forward and forward_into check of tiled operands alike, and what they
// derive: the expanded parameters, the output shape, and whether the case is
// degenerate (answered by the plain forward).
struct TiledForward {
  ConvParams params;
  Shape out_shape;
  bool degenerate = false;
};
TiledForward check_tiled_forward(const TiledTensor& x, const Tensor& w, const Tensor& b,
                                 const ConvParams& params) {
  check_tiles(x, "input", w, "weight");
  if (b.defined()) check_tiles(x, "input", b, "bias");
  TiledForward f;
  f.params = check_conv_args(x.shape(), w.shape(), bias_shape(b), params);
  f.out_shape = output_shape(x.shape(), w.shape(), f.params);
  f.degenerate = x.numel() == 0 || w.numel() == 0 || shape_numel(f.out_shape) == 0;
  return f;
}

}  // namespace

Tensor LocalConvKernels::forward(const TiledTensor& x, const Tensor& w, const Tensor& b,
                                 const ConvParams& params) const {
  check_covers(x);
  check_operand(w, "weight");
  if (x.is_whole()) return forward(x.tiles()[0].data, w, b, params);
  const TiledForward f = check_tiled_forward(x, w, b, params);
  if (f.degenerate) return forward(x.assemble(), w, b, params);  // answered there
  Tensor y = Tensor::empty(f.out_shape, x.dtype(), x.device());
  run_pass(kernels::kConvForward, device_, dtype_, x.dtype(), "input",
           kernels::ConvForwardArgs{x, w.contiguous(), b.defined() ? b.contiguous() : Tensor(),
                                    f.params, y});
  return y;
}

void LocalConvKernels::forward_into(const TiledTensor& x, const Tensor& w, const Tensor& b,
                                    const ConvParams& params, const Tensor& out) const {
  check_covers(x);
  check_operand(w, "weight");
  check_operand(out, "out");
  check_tiles(x, "input", out, "out");
  const TiledForward f = check_tiled_forward(x, w, b, params);
  DTENSOR_CHECK_ARG(out.shape() == f.out_shape, kComponent, "out: shape {} but the output is {}",
                    shape_str(out.shape()), shape_str(f.out_shape));
  if (f.degenerate) {
    Tensor dst = out;  // a view: writing it writes the caller's tensor
    dst.copy_(forward(x.assemble(), w, b, params));  // answered there
    return;
  }
  run_pass(kernels::kConvForward, device_, dtype_, x.dtype(), "input",
           kernels::ConvForwardArgs{x, w.contiguous(), b.defined() ? b.contiguous() : Tensor(),
                                    f.params, out});
}

void LocalConvKernels::backward_data(const Tensor& grad_out, const Tensor& w,
                                     const TiledTensor& grad_input,
                                     const ConvParams& params) const {
  check_operand(grad_out, "grad_output");
  check_operand(w, "weight");
  check_same_kind(grad_out, "grad_output", w, "weight");
  check_tiles(grad_input, "grad_input", grad_out, "grad_output");
  const ConvParams p = check_grad_output(grad_out, grad_input.shape(), w.shape(), params);
  if (grad_input.numel() == 0 || w.numel() == 0 || grad_out.numel() == 0) {
    grad_input.zero_();
    return;
  }
  run_pass(kernels::kConvBackwardData, device_, dtype_, grad_out.dtype(), "grad_output",
           kernels::ConvBackwardDataArgs{grad_out.contiguous(), w.contiguous(), p, grad_input});
}

ConvWeightGrads LocalConvKernels::backward_weights(const Tensor& grad_out, const TiledTensor& x,
                                                   const Shape& weight_shape,
                                                   const ConvParams& params, bool want_bias) const {
  check_covers(x);
  check_operand(grad_out, "grad_output");
  if (x.is_whole())
    return backward_weights(grad_out, x.tiles()[0].data, weight_shape, params, want_bias);
  check_tiles(x, "input", grad_out, "grad_output");
  const ConvParams p = check_conv_args(x.shape(), weight_shape, std::nullopt, params);
  const Shape out_shape = output_shape(x.shape(), weight_shape, p);
  if (x.numel() == 0 || shape_numel(weight_shape) == 0 || grad_out.numel() == 0 ||
      grad_out.shape() != out_shape)  // degenerate or wrong: answered (or rejected) there
    return backward_weights(grad_out, x.assemble(), weight_shape, params, want_bias);
  return run_backward_weights(device_, dtype_, grad_out, x, weight_shape, p, want_bias);
}

std::string LocalConvKernels::name() const {
  return fmt::format("{} {}", device_type_name(device_), dtype_name(dtype_));
}

std::shared_ptr<LocalConvKernels> local_conv_kernels(Device device, DType dtype) {
  if (!has_local_conv_kernels(device.type, dtype))
    throw NotSupported(kComponent,
                       fmt::format("no local convolution kernels for {} tensors of dtype {} in "
                                   "this build",
                                   device_type_name(device.type), dtype_name(dtype)));
  return std::make_shared<LocalConvKernels>(device.type, dtype);
}

bool has_local_conv_kernels(DeviceType device, DType dtype) {
  return has_kernel(kernels::kConvForward, device, dtype);
}

namespace kernels {

DenseConvKernels dense_conv_kernels(DenseConvPasses passes) {
  const auto shared = std::make_shared<const DenseConvPasses>(std::move(passes));
  DenseConvKernels k;
  k.forward = [shared](const ConvForwardArgs& a) {
    const Tensor x = a.input.is_whole() ? a.input.tiles()[0].data.contiguous() : a.input.assemble();
    Tensor out = a.output;  // a view of the caller's tensor
    out.copy_(shared->forward(x, a.weight, a.bias, a.params));
  };
  k.backward_data = [shared](const ConvBackwardDataArgs& a) {
    a.grad_input.scatter(
        shared->backward_data(a.grad_output, a.weight, a.grad_input.shape(), a.params));
  };
  k.backward_weights = [shared](const ConvBackwardWeightsArgs& a) {
    const Tensor x = a.input.is_whole() ? a.input.tiles()[0].data.contiguous() : a.input.assemble();
    const ConvWeightGrads g = shared->backward_weights(a.grad_output, x, a.grad_weight.shape(),
                                                       a.params, a.grad_bias.defined());
    Tensor gw = a.grad_weight, gb = a.grad_bias;
    gw.copy_(g.grad_weight);
    if (gb.defined()) gb.copy_(g.grad_bias);
  };
  return k;
}

void register_dense_conv_kernels(DeviceType device, DType dtype, DenseConvPasses passes,
                                 bool override_existing) {
  DTENSOR_CHECK_ARG(passes.forward && passes.backward_data && passes.backward_weights, kComponent,
                    "register_dense_conv_kernels: every pass is needed ({} {})",
                    device_type_name(device), dtype_name(dtype));
  DenseConvKernels k = dense_conv_kernels(std::move(passes));
  register_kernel(kConvForward, device, dtype, std::move(k.forward), override_existing);
  register_kernel(kConvBackwardData, device, dtype, std::move(k.backward_data), override_existing);
  register_kernel(kConvBackwardWeights, device, dtype, std::move(k.backward_weights),
                  override_existing);
}

}  // namespace kernels
}  // namespace dtensor
