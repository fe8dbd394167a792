// The tensor-parallel convolution: the handlers of "convolution" and
// "convolution_backward" (docs/halo.md), on the window engine.
//
// The propagator picks a strategy (conv_strategies.h) and the inputs are
// redistributed to it; then each rank
//   forward:  gathers the window of its input along every spatially sharded
//             mesh dim in mesh order (corners come along on later dims), and
//             runs the local convolution on the window with the plan's local
//             padding;
//   backward: rebuilds the same window, runs backward-data on it and returns
//             the window's gradient to its owners in reverse mesh order (each
//             part added where it belongs); backward-weights on the window
//             gives this rank's partial sums. The window's exchange runs
//             while backward-data computes, the gradient's while
//             backward-weights does.
// Everything is computed from global shapes: no sizes are exchanged.
//
// The window comes as tiles (WindowExchange::post), which the kernel reads
// where they lie: the shard itself and each received strip; the window's
// gradient is written straight into the shard's gradient and the strips
// going back. With zero padding the window stops at the input's edges and
// the kernel pads; with a padding mode the engine materialises the
// reflected, replicated or wrapped padding and the kernel runs without.
//
// The handlers communicate only through OpCall::group() (registered with
// HandlerOptions::defers_agreement): their exchanges are posted at once on
// the call's own tags, and dispatch's agreement check is confirmed by the
// group before anything waits, so it travels with the halo messages.
#include <functional>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "dtensor/core/errors.h"
#include "dtensor/core/logging.h"
#include "dtensor/ops/convolution.h"
#include "dtensor/ops/dispatch.h"
#include "dtensor/ops/local_conv.h"
#include "dtensor/ops/window.h"
#include "dtensor/placement/redistribute.h"
#include "ops/conv/conv_call.h"
#include "ops/conv/conv_strategies.h"
#include "ops/detail/agreed_front_end.h"
#include "ops/detail/weighted_op.h"

namespace dtensor::conv {
namespace {

// The tags of a call's two exchanges: a backward has its window's and its
// gradient's in flight at once between the same ranks.
constexpr int kWindowStream = 0, kGradientStream = 1;

// The bias goes to exactly one rank of every mesh dim whose output is a
// pending sum, so the sum counts it once (docs/design.md §2, defect 7).
bool owns_bias(const DTensorSpec& input, const std::vector<MeshDimRole>& roles) {
  const auto& coord = *input.mesh().get_coordinate();
  for (std::size_t m = 0; m < roles.size(); ++m)
    if ((roles[m] == MeshDimRole::Partial || roles[m] == MeshDimRole::Channel) && coord[m] != 0)
      return false;
  return true;
}

// What the convolution reads along every spatial dim. With zero padding the
// window stops at the input's edges and the kernel pads it; with a padding
// mode the engine materialises the padding into the window.
std::vector<WindowDim> window_dims(const Shape& weight_shape, const ConvParams& p) {
  std::vector<WindowDim> dims;
  for (std::size_t sd = 0; sd < p.stride.size(); ++sd)
    dims.push_back(WindowDim::sliding(weight_shape[sd + 2], p.stride[sd], p.dilation[sd],
                                      p.padding[sd].first, p.padding[sd].second,
                                      boundary_of(p.padding_mode)));
  return dims;
}

// The local kernel's parameters on the window: each dim's padding is the part
// of the global padding the window touches (none where it is materialised).
ConvParams window_params(ConvParams p, const WindowExchange& engine) {
  for (std::size_t sd = 0; sd < p.padding.size(); ++sd)
    p.padding[sd] = {engine.spans()[sd].pad_left, engine.spans()[sd].pad_right};
  p.padding_mode = PaddingMode::Zeros;
  return p;
}

Tensor forward_handler(OpCall& call, const detail::WeightedOperands<ForwardCall>& in) {
  const ConvParams& p = in.call.params;
  const DTensor& x = in.tensors[0];
  const DTensor& w = in.tensors[1];
  const auto roles = roles_of(x.placements(), w.placements());
  const Tensor local = x.to_local();
  const Tensor bias =
      in.call.bias && owns_bias(x.spec(), roles) ? in.tensors[2].to_local() : Tensor();
  WindowExchange engine(call, x.spec(), window_dims(w.shape(), p), kWindowStream);
  // The window as tiles, read where they lie: the shard and each received strip.
  WindowExchange::Pending pending = engine.post(local);
  const TiledTensor& window = pending.wait();
  return engine.has_output()
             ? in.kernels->forward(window, w.to_local(), bias, window_params(p, engine))
             : Tensor::zeros(in.sharding.output_specs[0].local_shape(), x.dtype(), local.device());
}

std::vector<Tensor> backward_handler(OpCall& call,
                                     const detail::WeightedOperands<BackwardCall>& in) {
  const ConvParams& p = in.call.params;
  const ConvOutputMask mask = in.call.mask;
  const bool need_window = mask.weight || mask.bias;
  const DTensor& gy = in.tensors[0];
  const DTensor& x = in.tensors[1];
  const DTensor& w = in.tensors[2];
  const auto& kernels = in.kernels;
  const Tensor local = x.to_local();
  std::vector<Tensor> locals;
  auto weight_grads = [&](const TiledTensor& window, const ConvParams& local_params,
                          bool has_output) {
    ConvWeightGrads wg;
    if (has_output) {
      wg = kernels->backward_weights(gy.to_local(), window, w.to_local().shape(), local_params,
                                     mask.bias);
    } else {  // no output here: this rank's share of the sums is zero
      wg.grad_weight = Tensor::zeros(w.to_local().shape(), x.dtype(), local.device());
      wg.grad_bias = Tensor::zeros({w.to_local().size(0)}, x.dtype(), local.device());
    }
    if (mask.weight) locals.push_back(wg.grad_weight);
    if (mask.bias) locals.push_back(wg.grad_bias);
  };

  // Both exchanges run behind compute: the window's (which backward_weights
  // needs) while backward_data computes, the gradient's while
  // backward_weights computes. Every rank has the same mask (the agreement
  // check covers it), so all skip the window's exchange alike when no weight
  // or bias gradient is asked for.
  WindowExchange engine(call, x.spec(), window_dims(w.shape(), p), kWindowStream);
  const ConvParams local_params = window_params(p, engine);
  std::optional<WindowExchange::Pending> pending;
  if (need_window) pending.emplace(engine.post(local));
  std::optional<WindowExchange::Gradient> grad_input;
  if (mask.input) {
    grad_input.emplace(engine.gradient(kGradientStream));
    if (engine.has_output())
      kernels->backward_data(gy.to_local(), w.to_local(), grad_input->window(), local_params);
    else
      grad_input->window().zero_();
    grad_input->post();
  }
  if (need_window) weight_grads(pending->wait(), local_params, engine.has_output());
  if (grad_input) locals.insert(locals.begin(), grad_input->finish());
  return locals;
}

const detail::WeightedOpRegistration<ForwardCall, BackwardCall> kConv{
    {kNames, check_conv_args, conv_output_shape, forward_strategies, backward_strategies,
     forward_handler, backward_handler}};

}  // namespace
}  // namespace dtensor::conv

namespace dtensor {

DTensor convolution(const DTensor& input, const DTensor& weight, const std::optional<DTensor>& bias,
                    const ConvParams& params) {
  return detail::call_weighted_forward(conv::kConv.op, input, weight, bias, params);
}

ConvGrads convolution_backward(const DTensor& grad_output, const DTensor& input,
                               const DTensor& weight, const ConvParams& params,
                               const ConvOutputMask& mask) {
  return detail::call_weighted_backward(conv::kConv.op, grad_output, input, weight, params, mask);
}

}  // namespace dtensor
