// A halo chain's other window layers and activations (halo_chain_layer_ops.h).
#include "ops/window/halo_chain_layer_ops.h"

#include "dtensor/ops/kernels/channel.h"
#include "dtensor/ops/registry.h"
#include "ops/window/conv_transpose_call.h"
#include "ops/window/pool_taps.h"
#include "ops/window/resample_taps.h"

namespace dtensor::halo::chain {

// An activation layer on local tensors ({x}, or {grad_output, x} for the
// backward), by its operator's own kernel (the same arithmetic as the
// layer run alone).
Tensor activation(const Layer& l, std::vector<OpArg> args, bool backward) {
  if (l.op == "leaky_relu") args.emplace_back(l.negative_slope);
  if (l.op == "gelu") args.emplace_back(std::string(gelu_approximate_name(l.approximate)));
  const std::string op = backward ? l.op + "_backward" : l.op;
  const Tensor& t = std::get<Tensor>(args.front());
  const OpSchema schema(op, args);
  return op_kernel(op, t.device().type, t.dtype())(KernelCall{schema, std::move(args), {}, {}})
      .at(0);
}

// Pool layer `l`'s taps per spatial dim: window layer k's outputs reading
// the range of the layer before it.
std::vector<kernels::PoolTaps> pool_taps_of(const Layer& l, const Geometry& g, int k,
                                            std::int64_t spatial) {
  std::vector<kernels::PoolTaps> out;
  for (std::int64_t d = 0; d < spatial; ++d) {
    const auto i = static_cast<std::size_t>(d);
    const PoolParams& p = l.pool_params;
    const WindowDim dim = WindowDim::sliding(p.kernel[i], p.stride[i], p.dilation[i],
                                             p.padding[i].first, p.padding[i].second);
    const detail::ChainStep& s = g.dims[i].steps[static_cast<std::size_t>(k)];
    const WindowSpan span{
        d + 2, {s.out_begin, s.out_end - s.out_begin}, s.in_begin, s.in_end - s.in_begin};
    out.push_back(window::pool_taps(dim, g.dims[i].lengths[static_cast<std::size_t>(k)], span));
  }
  return out;
}

// Upsample layer `l`'s taps per spatial dim, likewise (`backward`: PyTorch's
// backward index rule, resample_taps.h).
std::vector<kernels::ResampleTaps> resample_taps_of(const Layer& l, const Geometry& g, int k,
                                                    bool backward) {
  std::vector<kernels::ResampleTaps> out;
  for (std::size_t i = 0; i < l.resample.size(); ++i) {
    const detail::ChainStep& s = g.dims[i].steps[static_cast<std::size_t>(k)];
    const WindowSpan span{static_cast<std::int64_t>(i) + 2,
                          {s.out_begin, s.out_end - s.out_begin},
                          s.in_begin,
                          s.in_end - s.in_begin};
    out.push_back(window::resample_taps(
        l.resample[i], g.dims[i].lengths[static_cast<std::size_t>(k)], span, backward));
  }
  return out;
}
TransposedSpan transposed_span(const Layer& l, const Geometry& g, int k) {
  TransposedSpan t;
  for (std::size_t d = 0; d < l.dims.size(); ++d) {
    const detail::ChainStep& s = g.dims[d].steps[static_cast<std::size_t>(k)];
    const detail::ChainWindowDim& c = l.dims[d];
    t.length.push_back((s.in_end - s.in_begin - 1) * c.stride + c.extent);
    t.offset.push_back(s.out_begin - (s.in_begin * c.stride - c.pad_left));
  }
  return t;
}

// `t` ([N, C, the span...]) cut to the layer's range.
Tensor range_of_span(const Tensor& t, const TransposedSpan& span, const Geometry& g, int k) {
  Tensor v = t;
  for (std::size_t d = 0; d < span.offset.size(); ++d)
    v = v.narrow(static_cast<std::int64_t>(d) + 2, span.offset[d],
                 g.range(d, k).second - g.range(d, k).first);
  return v;
}

Shape span_shape(std::int64_t batch, std::int64_t channels, const TransposedSpan& span) {
  Shape shape{batch, channels};
  shape.insert(shape.end(), span.length.begin(), span.length.end());
  return shape;
}

// A transposed convolution layer on local tensors over its ranges: `x` its
// input, `y` its output (written).
void conv_transpose_forward(const Layer& l, const TransposedSpan& span,
                            const LocalConvKernels& kernels, const Tensor& w, const Tensor& bias,
                            const Tensor& x, Tensor y, const Geometry& g, int k) {
  const Tensor full =
      kernels.backward_data(x.contiguous(), w, span_shape(x.size(0), y.size(1), span),
                            tconv::local_convolution(l.transposed));
  y.copy_(range_of_span(full, span, g, k));
  if (bias.defined() && y.numel() > 0)
    run_kernel(kernels::kChannelBias, y.device().type, y.dtype(), {y, bias});
}

// A pool layer on local tensors over its ranges ([N, C, spatial...]).
void pool_forward(const Layer& l, const std::vector<kernels::PoolTaps>& taps, const Tensor& x,
                  const Tensor& y) {
  const DeviceType device = x.device().type;
  if (l.average)
    run_kernel(kernels::kAvgPoolForward, device, x.dtype(), {x, taps, l.divisor, y});
  else
    run_kernel(kernels::kMaxPoolForward, device, x.dtype(), {x, taps, y});
}

// Its backward: the input's gradient `gx` (overwritten) from the output's
// `gy`; a halo cell's is this rank's part, as the conv's.
void pool_backward(const Layer& l, const std::vector<kernels::PoolTaps>& taps, const Tensor& x,
                   const Tensor& gy, const Tensor& gx) {
  const DeviceType device = x.device().type;
  if (l.average)
    run_kernel(kernels::kAvgPoolBackward, device, x.dtype(), {gy, taps, l.divisor, gx});
  else
    run_kernel(kernels::kMaxPoolBackward, device, x.dtype(), {x, gy, taps, gx});
}

}  // namespace dtensor::halo::chain
