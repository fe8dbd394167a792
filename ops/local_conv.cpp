#include "dtensor/ops/local_conv.h"

#include <algorithm>
#include <map>
#include <mutex>
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
Tensor bias_grad(const Tensor& grad_out) {
  const Tensor g = grad_out.contiguous();
  Tensor sums = Tensor::empty({g.size(1)}, DType::F64);
  run_kernel(kernels::kChannelSums, g.device().type, g.dtype(), kernels::ChannelSumsArgs{g, sums});
  return sums.to(grad_out.dtype()).to(grad_out.device());
}

// An implementation returned the wrong shape: the backend's bug, not the caller's.
void check_result(const std::string& backend, const char* pass, const Shape& got,
                  const Shape& want) {
  if (got != want)
    throw Error(kComponent, fmt::format("{} {} returned shape {}, expected {}", backend, pass,
                                        shape_str(got), shape_str(want)));
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

struct Registry {
  std::mutex mu;
  std::map<std::pair<DeviceType, DType>, std::shared_ptr<LocalConvKernels>> kernels;
};

// Function-local so that backends' static registrars, which run while the
// shared object loads, never see it unconstructed.
Registry& registry() {
  static Registry r;
  return r;
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
  if (x.numel() == 0 || w.numel() == 0 || shape_numel(out_shape) == 0) {
    // No data reaches any output (empty shard, window wholly in padding): the
    // output is the bias alone.
    Tensor y = Tensor::zeros(out_shape, x.dtype(), x.device());
    if (b.defined() && y.numel() > 0) {
      const Tensor hb = b.to(Device::cpu());
      for (std::int64_t c = 0; c < out_shape[1]; ++c)
        y.narrow(1, c, 1).fill_(hb.item_flat(c));
    }
    return y;
  }
  Tensor y =
      forward_impl(x.contiguous(), w.contiguous(), b.defined() ? b.contiguous() : Tensor(), p);
  check_result(name(), "forward", y.shape(), out_shape);
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
  Tensor gx = backward_data_impl(grad_out.contiguous(), w.contiguous(), input_shape, p);
  check_result(name(), "backward_data", gx.shape(), input_shape);
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
    if (want_bias) g.grad_bias = bias_grad(grad_out);
    return g;
  }
  ConvWeightGrads g =
      backward_weights_impl(grad_out.contiguous(), x.contiguous(), weight_shape, p, want_bias);
  if (g.grad_weight.shape() != weight_shape ||
      (want_bias && (!g.grad_bias.defined() || g.grad_bias.shape() != Shape{weight_shape[0]})))
    throw Error(kComponent, fmt::format("{} backward_weights returned grad_weight {} and "
                                        "grad_bias {}, expected {} and [{}]",
                                        name(), g.grad_weight.str(), g.grad_bias.str(),
                                        shape_str(weight_shape), weight_shape[0]));
  if (!want_bias) g.grad_bias = Tensor();
  return g;
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
  Tensor y =
      forward_tiled_impl(x, w.contiguous(), b.defined() ? b.contiguous() : Tensor(), f.params);
  check_result(name(), "forward", y.shape(), f.out_shape);
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
  forward_into_impl(x, w.contiguous(), b.defined() ? b.contiguous() : Tensor(), f.params, out);
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
  backward_data_tiled_impl(grad_out.contiguous(), w.contiguous(), grad_input, p);
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
  ConvWeightGrads g =
      backward_weights_tiled_impl(grad_out.contiguous(), x, weight_shape, p, want_bias);
  if (!want_bias) g.grad_bias = Tensor();
  return g;
}

Tensor LocalConvKernels::forward_tiled_impl(const TiledTensor& x, const Tensor& w, const Tensor& b,
                                            const ConvParams& params) const {
  return forward_impl(x.assemble().contiguous(), w, b, params);
}

void LocalConvKernels::forward_into_impl(const TiledTensor& x, const Tensor& w, const Tensor& b,
                                         const ConvParams& params, const Tensor& out) const {
  Tensor dst = out;
  dst.copy_(forward_tiled_impl(x, w, b, params));
}

void LocalConvKernels::backward_data_tiled_impl(const Tensor& grad_out, const Tensor& w,
                                                const TiledTensor& grad_input,
                                                const ConvParams& params) const {
  grad_input.scatter(backward_data_impl(grad_out, w, grad_input.shape(), params));
}

ConvWeightGrads LocalConvKernels::backward_weights_tiled_impl(const Tensor& grad_out,
                                                              const TiledTensor& x,
                                                              const Shape& weight_shape,
                                                              const ConvParams& params,
                                                              bool want_bias) const {
  return backward_weights_impl(grad_out, x.assemble().contiguous(), weight_shape, params,
                               want_bias);
}

void register_local_conv_kernels(DeviceType device, DType dtype,
                                 std::shared_ptr<LocalConvKernels> kernels) {
  DTENSOR_CHECK_ARG(kernels != nullptr, kComponent,
                    "register_local_conv_kernels: null kernels for {} {}", device_type_name(device),
                    dtype_name(dtype));
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  r.kernels[{device, dtype}] = std::move(kernels);
}

std::shared_ptr<LocalConvKernels> local_conv_kernels(Device device, DType dtype) {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  auto it = r.kernels.find({device.type, dtype});
  if (it == r.kernels.end())
    throw NotSupported(kComponent,
                       fmt::format("no local convolution kernels for {} tensors of dtype {} in "
                                   "this build",
                                   device_type_name(device.type), dtype_name(dtype)));
  return it->second;
}

bool has_local_conv_kernels(DeviceType device, DType dtype) {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  return r.kernels.count({device, dtype}) != 0;
}

}  // namespace dtensor
