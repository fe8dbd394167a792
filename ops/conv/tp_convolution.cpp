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
// With zero padding the window is read where it lies (the tiled executor,
// halo_exchange.h); with a padding mode the engine materialises the
// reflected, replicated or wrapped padding into the window
// (WindowExchange) and the kernel runs without padding.
//
// The handlers communicate only through OpCall::group() (registered with
// HandlerOptions::defers_agreement): their exchanges are posted at once on
// the call's own tags, and dispatch's agreement check is confirmed by the
// group before anything waits, so it travels with the halo messages.
#include <functional>
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
#include "ops/conv/halo_exchange.h"
#include "ops/detail/agreed_front_end.h"
#include "ops/detail/weighted_op.h"

namespace dtensor::conv {
namespace {

// One spatially sharded mesh dim: its tensor dim, plan row and group.
struct HaloDim {
  std::int64_t mesh_dim;
  std::int64_t tensor_dim;
  HaloPlan plan;
  std::int64_t index;  // this rank's index along the mesh dim
  ProcessGroup* group;
  const HaloRankPlan& me() const { return plan.rank(index); }
};

struct LocalGeometry {
  std::vector<HaloDim> halos;  // in mesh-dim order
  ConvParams params;           // padding of sharded dims replaced by the window's
  bool has_output = true;      // false when some sharded dim gives this rank no output
};

LocalGeometry local_geometry(OpCall& call, const DTensorSpec& input, const Shape& weight_shape,
                             const ConvParams& p) {
  LocalGeometry g;
  g.params = p;
  const auto& mesh = input.mesh();
  const auto& coord = *mesh.get_coordinate();
  for (std::int64_t m = 0; m < mesh.ndim(); ++m) {
    const Placement& pl = input.placements()[m];
    if (!pl.is_shard() || pl.dim() < 2) continue;
    const std::int64_t td = pl.dim(), sd = td - 2;
    HaloGeometry geo{input.shape()[td], mesh.size(m),        weight_shape[td],    p.stride[sd],
                     p.dilation[sd],    p.padding[sd].first, p.padding[sd].second};
    HaloDim h{m, td, HaloPlan(geo), coord[m], &call.group(m)};
    g.params.padding[sd] = {h.me().pad_left, h.me().pad_right};
    g.has_output = g.has_output && h.me().has_output;
    g.halos.push_back(std::move(h));
  }
  return g;
}

// The tags of a call's two exchanges: a backward has its window's and its
// gradient's in flight at once between the same ranks.
constexpr int kWindowStream = 0, kGradientStream = 1;

// The window along every sharded dim but the last, gathered into one tensor
// (the next dim's exchange sends slices of it: that is how the corners
// travel). These exchanges wait at once (the call's group confirms its
// agreement check before).
Tensor gather_earlier_windows(Tensor x, const LocalGeometry& g) {
  for (std::size_t i = 0; i + 1 < g.halos.size(); ++i)
    x = gather_window(x, g.halos[i].tensor_dim, g.halos[i].me(), *g.halos[i].group, kWindowStream);
  return x;
}

// The last dim's exchange of the window, posted; the window stays in tiles,
// which the kernel reads in place. Nullopt when no dim is sharded.
std::optional<PendingWindow> post_window(const Tensor& x, const LocalGeometry& g) {
  if (g.halos.empty()) return std::nullopt;
  const HaloDim& last = g.halos.back();
  return std::make_optional<PendingWindow>(gather_earlier_windows(x, g), last.tensor_dim, last.me(),
                                           *last.group, kWindowStream);
}

// `shape` with the window's extent on the first `dims` exchanged dims (all of
// them: the whole window; all but the last: what the last dim's exchange
// works on).
Shape windowed(Shape shape, const LocalGeometry& g, std::size_t dims) {
  for (std::size_t i = 0; i < dims; ++i)
    shape[static_cast<std::size_t>(g.halos[i].tensor_dim)] = g.halos[i].me().window.length;
  return shape;
}

// The bias goes to exactly one rank of every mesh dim whose output is a
// pending sum, so the sum counts it once (docs/design.md §2, defect 7).
bool owns_bias(const DTensorSpec& input, const std::vector<MeshDimRole>& roles) {
  const auto& coord = *input.mesh().get_coordinate();
  for (std::size_t m = 0; m < roles.size(); ++m)
    if ((roles[m] == MeshDimRole::Partial || roles[m] == MeshDimRole::Channel) && coord[m] != 0)
      return false;
  return true;
}

// A padding mode other than zeros: the engine materialises the padding into
// the window on every spatial dim, and the kernel runs without padding.
std::vector<WindowDim> materialised_dims(const Shape& weight_shape, const ConvParams& p) {
  const Boundary b = p.padding_mode == PaddingMode::Reflect     ? Boundary::Reflect
                     : p.padding_mode == PaddingMode::Replicate ? Boundary::Replicate
                                                                : Boundary::Circular;
  std::vector<WindowDim> dims;
  for (std::size_t sd = 0; sd < p.stride.size(); ++sd)
    dims.push_back(WindowDim::sliding(weight_shape[sd + 2], p.stride[sd], p.dilation[sd],
                                      p.padding[sd].first, p.padding[sd].second, b));
  return dims;
}

ConvParams without_padding(ConvParams p) {
  for (auto& pad : p.padding)
    pad = {0, 0};
  p.padding_mode = PaddingMode::Zeros;
  return p;
}

std::vector<DTensor> forward_handler(OpCall& call) {
  const ForwardCall& c = decoded<ForwardCall>(call.schema());
  const ConvParams& p = c.params;
  const auto& sharding = call.sharding();
  auto inputs = call.redistributed_inputs();
  const DTensor& x = inputs[0];
  const DTensor& w = inputs[1];
  const auto roles = roles_of(x.placements(), w.placements());
  const DTensorSpec& out_spec = sharding.output_specs[0];

  // Looked up on every rank before any exchange, so a missing kernel fails
  // them all alike.
  const auto kernels = local_conv_kernels(x.to_local().device(), x.dtype());
  const Tensor local = x.to_local();
  const Tensor bias = c.bias && owns_bias(x.spec(), roles) ? inputs[2].to_local() : Tensor();
  Tensor y;
  if (p.padding_mode != PaddingMode::Zeros) {
    WindowExchange engine(call, x.spec(), materialised_dims(w.shape(), p), kWindowStream);
    const Tensor window = engine.gather(local);
    y = engine.has_output()
            ? kernels->forward(TiledTensor::whole(window), w.to_local(), bias, without_padding(p))
            : Tensor::zeros(out_spec.local_shape(), x.dtype(), local.device());
  } else {
    const LocalGeometry g = local_geometry(call, x.spec(), w.shape(), p);
    std::optional<PendingWindow> pending = post_window(local, g);
    const TiledTensor window = pending ? pending->wait() : TiledTensor::whole(local);
    y = g.has_output ? kernels->forward(window, w.to_local(), bias, g.params)
                     : Tensor::zeros(out_spec.local_shape(), x.dtype(), local.device());
  }
  DTENSOR_CHECK_ARG(y.shape() == out_spec.local_shape(), "conv",
                    "internal: local output {} but the output spec {} needs {}",
                    shape_str(y.shape()), out_spec.str(), shape_str(out_spec.local_shape()));
  return {DTensor(y, out_spec)};
}

// The input gradient, in two halves around backward_weights: the kernel
// writes the window's gradient straight into the owned gradient and the
// strips going back, and the last dim's exchange is posted; finish() waits
// for it, then returns the other dims' parts in reverse mesh order, each
// added where it belongs. `owned` is the shape the last dim's exchange works
// on: the input with the earlier dims' windows.
class InputGradient {
 public:
  InputGradient(const LocalConvKernels& kernels, const Tensor& gy, const Tensor& w,
                const Shape& owned, DType dtype, Device device, const LocalGeometry& g, int tag)
      : g_(g), tag_(tag) {
    if (g.halos.empty()) {
      done_ = g.has_output ? kernels.backward_data(gy, w, owned, g.params)
                           : Tensor::zeros(owned, dtype, device);
      return;
    }
    const HaloDim& last = g.halos.back();
    wg_.emplace(owned, dtype, device, last.tensor_dim, last.me());
    if (g.has_output)
      kernels.backward_data(gy, w, wg_->window(), g.params);
    else
      wg_->window().zero_();
    wg_->post(*last.group, tag_);
  }

  Tensor finish() {
    if (!wg_) return done_;
    Tensor grad = wg_->finish();
    for (std::size_t i = g_.halos.size() - 1; i-- > 0;) {
      const HaloDim& h = g_.halos[i];
      Shape owned = grad.shape();
      owned[h.tensor_dim] = h.me().input.length;
      grad = scatter_add_window(grad, h.tensor_dim, h.me(), *h.group, owned, tag_);
    }
    return grad;
  }

 private:
  const LocalGeometry& g_;
  int tag_;
  std::optional<WindowGradient> wg_;
  Tensor done_;
};

std::vector<DTensor> backward_handler(OpCall& call) {
  const BackwardCall& c = decoded<BackwardCall>(call.schema());
  const ConvParams& p = c.params;
  const ConvOutputMask mask = c.mask;
  const auto& sharding = call.sharding();
  auto inputs = call.redistributed_inputs();
  const DTensor& gy = inputs[0];
  const DTensor& x = inputs[1];
  const DTensor& w = inputs[2];
  auto kernels = local_conv_kernels(x.to_local().device(), x.dtype());
  const Tensor local = x.to_local();
  const bool need_window = mask.weight || mask.bias;
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

  if (p.padding_mode != PaddingMode::Zeros) {
    // The materialised window serves both gradients; its gradient goes back
    // through the engine, reflected, replicated or wrapped parts included.
    WindowExchange engine(call, x.spec(), materialised_dims(w.shape(), p), kWindowStream);
    const Tensor window = engine.gather(local);
    const ConvParams unpadded = without_padding(p);
    if (need_window) weight_grads(TiledTensor::whole(window), unpadded, engine.has_output());
    if (mask.input) {
      const Tensor gw =
          engine.has_output()
              ? kernels->backward_data(gy.to_local(), w.to_local(), window.shape(), unpadded)
              : Tensor::zeros(window.shape(), x.dtype(), local.device());
      locals.insert(locals.begin(), engine.scatter_add(gw));
    }
  } else {
    // Both exchanges run behind compute: the window's (which
    // backward_weights needs) while backward_data computes, the gradient's
    // while backward_weights computes. Every rank has the same mask (the
    // agreement check covers it), so all skip the window's exchange alike
    // when no weight or bias gradient is asked for.
    const LocalGeometry g = local_geometry(call, x.spec(), w.shape(), p);
    // The last exchange's input: the earlier dims' windows.
    const Shape owned = windowed(local.shape(), g, g.halos.empty() ? 0 : g.halos.size() - 1);
    std::optional<PendingWindow> pending;
    if (need_window) pending = post_window(local, g);
    std::optional<InputGradient> grad_input;
    if (mask.input)
      grad_input.emplace(*kernels, gy.to_local(), w.to_local(), owned, x.dtype(), local.device(), g,
                         kGradientStream);
    if (need_window)
      weight_grads(pending ? pending->wait() : TiledTensor::whole(local), g.params, g.has_output);
    if (grad_input) locals.insert(locals.begin(), grad_input->finish());
  }
  return detail::weighted_gradients("conv", sharding.output_specs, locals, c.input, mask.input);
}

const detail::WeightedOp<ForwardCall, BackwardCall> kConv{
    .component = "conv",
    .forward_op = kForwardOp,
    .backward_op = kBackwardOp,
    .output_name = "the convolution's output",
    .input_layout = "[N, C, spatial...]",
    .check = check_conv_args,
    .output_shape = conv_output_shape,
    .forward_strategies = forward_strategies,
    .backward_strategies = backward_strategies,
    .forward_handler = forward_handler,
    .backward_handler = backward_handler,
};

struct Registrar {
  Registrar() { detail::register_weighted_op(kConv); }
};
const Registrar registrar;

}  // namespace
}  // namespace dtensor::conv

namespace dtensor {

DTensor convolution(const DTensor& input, const DTensor& weight, const std::optional<DTensor>& bias,
                    const ConvParams& params) {
  return detail::call_weighted_forward(conv::kConv, input, weight, bias, params);
}

ConvGrads convolution_backward(const DTensor& grad_output, const DTensor& input,
                               const DTensor& weight, const ConvParams& params,
                               const ConvOutputMask& mask) {
  return detail::call_weighted_backward(conv::kConv, grad_output, input, weight, params, mask);
}

}  // namespace dtensor
