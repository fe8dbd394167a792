// The tensor-parallel convolution: the handlers of "convolution" and
// "convolution_backward" (DESIGN.md §5, docs/halo.md).
//
// The propagator picks a strategy (conv_strategies.h) and the inputs are
// redistributed to it; then each rank
//   forward:  gathers the window of its input along every spatially sharded
//             mesh dim in mesh order (corners come along on later dims), and
//             runs the local convolution on the window with the plan's local
//             padding (when it pays, the last dim's exchange runs while the
//             interior outputs are computed: overlapped_forward.h);
//   backward: rebuilds the same window, runs backward-data on it and returns
//             the window's gradient to its owners in reverse mesh order (each
//             part added where it belongs); backward-weights on the window
//             gives this rank's partial sums. The window's exchange runs
//             while backward-data computes, the gradient's while
//             backward-weights does.
// Everything is computed from global shapes: no sizes are exchanged.
//
// Both handlers confirm dispatch's agreement check themselves
// (HandlerOptions::confirms_agreement): their last dim's exchange goes with
// the call's own tag (OpCall::message_tag), so it is posted first and the
// check travels with it; the forward confirms before waiting for its window,
// the backward after backward-data. Exchanges that block at once (the
// earlier dims of an N-D sharding) come after confirming.
#include <functional>
#include <string>

#include <fmt/format.h>

#include "dtensor/core/errors.h"
#include "dtensor/core/logging.h"
#include "dtensor/ops/convolution.h"
#include "dtensor/ops/dispatch.h"
#include "dtensor/ops/local_conv.h"
#include "dtensor/placement/redistribute.h"
#include "ops/conv/conv_call.h"
#include "ops/conv/conv_strategies.h"
#include "ops/conv/halo_exchange.h"
#include "ops/conv/overlapped_forward.h"

namespace dtensor::conv {
namespace {

// One spatially sharded mesh dim: its tensor dim, plan row and group.
struct HaloDim {
  std::int64_t mesh_dim;
  std::int64_t tensor_dim;
  HaloPlan plan;
  std::int64_t index;  // this rank's index along the mesh dim
  std::shared_ptr<ProcessGroup> group;
  const HaloRankPlan& me() const { return plan.rank(index); }
};

struct LocalGeometry {
  std::vector<HaloDim> halos;  // in mesh-dim order
  ConvParams params;           // padding of sharded dims replaced by the window's
  bool has_output = true;      // false when some sharded dim gives this rank no output
};

LocalGeometry local_geometry(const DTensorSpec& input, const Shape& weight_shape,
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
    HaloDim h{m, td, HaloPlan(geo), coord[m], mesh.get_group(m)};
    g.params.padding[sd] = {h.me().pad_left, h.me().pad_right};
    g.has_output = g.has_output && h.me().has_output;
    g.halos.push_back(std::move(h));
  }
  return g;
}

// The tags of a call's two exchanges: a backward has its window's and its
// gradient's in flight at once between the same ranks.
constexpr int kWindowStream = 0, kGradientStream = 1;

// Only the last sharded dim's exchange is posted before the agreement check
// is confirmed, and only where its group keeps messages with different tags
// apart (Gloo, also for CUDA tensors staged through it): a group that matches
// them by order alone (NCCL) could pair a disagreeing rank's messages with
// the others'. Confirm first there.
void confirm_unless_tags_separate(OpCall& call, const Tensor& local, const LocalGeometry& g) {
  if (!g.halos.empty() && !g.halos.back().group->matches_by_tag(local.device().type))
    call.confirm_agreement();
}

// The window along every sharded dim but the last, gathered into one tensor
// (the next dim's exchange sends slices of it: that is how the corners
// travel). These exchanges wait at once, so the call's agreement is
// confirmed first.
Tensor gather_earlier_windows(OpCall& call, Tensor x, const LocalGeometry& g) {
  if (g.halos.size() > 1) call.confirm_agreement();
  for (std::size_t i = 0; i + 1 < g.halos.size(); ++i)
    x = gather_window(x, g.halos[i].tensor_dim, g.halos[i].me(), *g.halos[i].group,
                      call.message_tag(kWindowStream));
  return x;
}

// The last dim's exchange of the window, posted; the window stays in tiles,
// which the kernel reads in place. Nullopt when no dim is sharded.
std::optional<PendingWindow> post_window(OpCall& call, const Tensor& x, const LocalGeometry& g) {
  if (g.halos.empty()) return std::nullopt;
  const HaloDim& last = g.halos.back();
  return std::make_optional<PendingWindow>(gather_earlier_windows(call, x, g), last.tensor_dim,
                                           last.me(), *last.group, call.message_tag(kWindowStream));
}

// `shape` with the window's extent on the first `dims` exchanged dims (all of
// them: the whole window; all but the last: what the last dim's exchange
// works on).
Shape windowed(Shape shape, const LocalGeometry& g, std::size_t dims) {
  for (std::size_t i = 0; i < dims; ++i)
    shape[static_cast<std::size_t>(g.halos[i].tensor_dim)] = g.halos[i].me().window.length;
  return shape;
}

// Where the forward overlaps the last dim's exchange with its interior
// outputs (overlapped_forward.h), or nullopt to run it after the exchange.
std::optional<InteriorOutputs> overlap_split(const Tensor& x, const Shape& weight_shape,
                                             const LocalGeometry& g, const Shape& out_shape) {
  const OverlapMode mode = overlap_mode();
  if (g.halos.empty() || !g.has_output || mode == OverlapMode::Never) return {};
  const HaloDim& last = g.halos.back();
  return interior_outputs(last.me(), weight_shape, g.params, last.tensor_dim - 2,
                          out_shape[static_cast<std::size_t>(last.tensor_dim)],
                          shape_numel(windowed(x.shape(), g, g.halos.size())),
                          mode == OverlapMode::Always);
}

// The bias goes to exactly one rank of every mesh dim whose output is a
// pending sum, so the sum counts it once (DESIGN.md §2, defect 7).
bool owns_bias(const DTensorSpec& input, const std::vector<MeshDimRole>& roles) {
  const auto& coord = *input.mesh().get_coordinate();
  for (std::size_t m = 0; m < roles.size(); ++m)
    if ((roles[m] == MeshDimRole::Partial || roles[m] == MeshDimRole::Channel) && coord[m] != 0)
      return false;
  return true;
}

std::vector<DTensor> forward_handler(OpCall& call) {
  const OpSchema& s = call.schema();
  const ConvParams p = decode_params(s, 3);
  const auto& sharding = call.sharding();
  auto inputs = call.redistributed_inputs();
  const DTensor& x = inputs[0];
  const DTensor& w = inputs[1];
  const bool has_bias = inputs.size() > 2;
  const auto roles = roles_of(x.placements(), w.placements());
  const LocalGeometry g = local_geometry(x.spec(), w.shape(), p);
  const DTensorSpec& out_spec = sharding.output_specs[0];

  // Looked up on every rank before any exchange, so a missing kernel fails
  // them all alike.
  const auto kernels = local_conv_kernels(x.to_local().device(), x.dtype());
  const Tensor local = x.to_local();
  confirm_unless_tags_separate(call, local, g);
  const Tensor bias = has_bias && owns_bias(x.spec(), roles) ? inputs[2].to_local() : Tensor();
  Tensor y;
  if (const auto split = overlap_split(local, w.shape(), g, out_spec.local_shape())) {
    const HaloDim& last = g.halos.back();
    y = overlapped_forward(*kernels, gather_earlier_windows(call, local, g), last.tensor_dim,
                           last.me(), *last.group, w.to_local(), bias, g.params,
                           out_spec.local_shape(), *split, call.message_tag(kWindowStream),
                           [&] { call.confirm_agreement(); });
  } else {
    std::optional<PendingWindow> pending = post_window(call, local, g);
    call.confirm_agreement();
    const TiledTensor window = pending ? pending->wait() : TiledTensor::whole(local);
    y = g.has_output ? kernels->forward(window, w.to_local(), bias, g.params)
                     : Tensor::zeros(out_spec.local_shape(), x.dtype(), local.device());
  }
  check_arg(y.shape() == out_spec.local_shape(), "conv",
            "internal: local output {} but the output spec {} needs {}", shape_str(y.shape()),
            out_spec.str(), shape_str(out_spec.local_shape()));
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

// grad_input goes back in the placements the caller's input had (when the
// propagator moved the input, the gradient moves back), except that a Partial
// where the input was replicated stays pending: reducing it is the caller's
// choice (filter parallelism gives one Partial term per filter shard).
DTensor placed_like_input(const DTensor& grad, const DTensor& input) {
  Placements target = input.placements();
  for (std::size_t m = 0; m < target.size(); ++m) {
    const Placement& g = grad.placements()[m];
    // The gradient of each pending term of a Partial input is the whole
    // gradient: whatever placement it was computed in is right (and a shard
    // could not become a pending sum anyway).
    if (target[m].is_partial() || (g.is_partial() && target[m].is_replicate())) target[m] = g;
  }
  return target == grad.placements() ? grad : grad.redistribute(grad.mesh(), target);
}

std::vector<DTensor> backward_handler(OpCall& call) {
  const OpSchema& s = call.schema();
  const ConvParams p = decode_params(s, 3);
  const ConvOutputMask mask = decode_mask(s, 7);
  const auto& sharding = call.sharding();
  auto inputs = call.redistributed_inputs();
  const DTensor& gy = inputs[0];
  const DTensor& x = inputs[1];
  const DTensor& w = inputs[2];
  const LocalGeometry g = local_geometry(x.spec(), w.shape(), p);
  auto kernels = local_conv_kernels(x.to_local().device(), x.dtype());

  // Both exchanges run behind compute: the window's (which backward_weights
  // needs) while backward_data computes, the gradient's while
  // backward_weights computes. Every rank has the same mask (the agreement
  // check covers it), so all skip the window's exchange alike when no weight
  // or bias gradient is asked for.
  const Tensor local = x.to_local();
  confirm_unless_tags_separate(call, local, g);
  const bool need_window = mask.weight || mask.bias;
  // The last exchange's input: the earlier dims' windows.
  const Shape owned = windowed(local.shape(), g, g.halos.empty() ? 0 : g.halos.size() - 1);
  std::optional<PendingWindow> pending;
  if (need_window) pending = post_window(call, local, g);
  std::optional<InputGradient> grad_input;
  if (mask.input)
    grad_input.emplace(*kernels, gy.to_local(), w.to_local(), owned, x.dtype(), local.device(), g,
                       call.message_tag(kGradientStream));
  // By now the check's messages have long arrived: confirming costs no wait.
  call.confirm_agreement();
  std::vector<Tensor> locals;
  if (need_window) {
    const TiledTensor window = pending ? pending->wait() : TiledTensor::whole(local);
    ConvWeightGrads wg;
    if (g.has_output) {
      wg = kernels->backward_weights(gy.to_local(), window, w.to_local().shape(), g.params,
                                     mask.bias);
    } else {  // no output here: this rank's share of the sums is zero
      wg.grad_weight = Tensor::zeros(w.to_local().shape(), x.dtype(), local.device());
      wg.grad_bias = Tensor::zeros({w.to_local().size(0)}, x.dtype(), local.device());
    }
    if (mask.weight) locals.push_back(wg.grad_weight);
    if (mask.bias) locals.push_back(wg.grad_bias);
  }
  if (grad_input) locals.insert(locals.begin(), grad_input->finish());
  std::vector<DTensor> outs;
  for (std::size_t i = 0; i < locals.size(); ++i) {
    const DTensorSpec& spec = sharding.output_specs[i];
    check_arg(locals[i].shape() == spec.local_shape(), "conv",
              "internal: gradient {} has local shape {} but {} needs {}", i,
              shape_str(locals[i].shape()), spec.str(), shape_str(spec.local_shape()));
    outs.emplace_back(locals[i], spec);
  }
  if (mask.input) outs[0] = placed_like_input(outs[0], s.dtensor(1));
  return outs;
}

void validate_forward(const OpSchema& s) {
  const DTensor& x = s.dtensor(0);
  const DTensor& w = s.dtensor(1);
  check_arg(w.dtype() == x.dtype(), "conv", "weight: dtype {} differs from the input's {}",
            dtype_name(w.dtype()), dtype_name(x.dtype()));
  std::optional<Shape> b;
  if (s.is_dtensor(2)) {
    b = s.dtensor(2).shape();
    check_arg(s.dtensor(2).dtype() == x.dtype(), "conv",
              "bias: dtype {} differs from the input's {}", dtype_name(s.dtensor(2).dtype()),
              dtype_name(x.dtype()));
  }
  check_conv_args(x.shape(), w.shape(), b, decode_params(s, 3));
}

void validate_backward(const OpSchema& s) {
  const DTensor& gy = s.dtensor(0);
  const DTensor& x = s.dtensor(1);
  const DTensor& w = s.dtensor(2);
  check_arg(w.dtype() == x.dtype() && gy.dtype() == x.dtype(), "conv",
            "grad_output: dtypes of grad_output ({}), input ({}) and weight ({}) must match",
            dtype_name(gy.dtype()), dtype_name(x.dtype()), dtype_name(w.dtype()));
  const ConvParams p = decode_params(s, 3);
  check_conv_args(x.shape(), w.shape(), std::nullopt, p);
  const Shape expect = conv_output_shape(x.shape(), w.shape(), p);
  check_arg(gy.shape() == expect, "conv",
            "grad_output: shape {} but the convolution's output is {}", shape_str(gy.shape()),
            shape_str(expect));
}

struct Registrar {
  Registrar() {
    OpDef fwd;
    fwd.name = kForwardOp;
    fwd.validate = validate_forward;
    fwd.output_meta = [](const OpSchema& s) {
      const auto& x = s.dtensor(0);
      return std::vector<TensorMeta>{
          {conv_output_shape(x.shape(), s.dtensor(1).shape(), decode_params(s, 3)), x.dtype()}};
    };
    fwd.strategies = forward_strategies;
    register_op(fwd);
    register_op_handler(kForwardOp, forward_handler, false, {.confirms_agreement = true});

    OpDef bwd;
    bwd.name = kBackwardOp;
    bwd.validate = validate_backward;
    bwd.output_meta = [](const OpSchema& s) {
      const auto& x = s.dtensor(1);
      const auto& w = s.dtensor(2);
      const ConvOutputMask m = decode_mask(s, 7);
      std::vector<TensorMeta> out;
      if (m.input) out.push_back({x.shape(), x.dtype()});
      if (m.weight) out.push_back({w.shape(), x.dtype()});
      if (m.bias) out.push_back({{w.shape()[0]}, x.dtype()});
      return out;
    };
    bwd.strategies = backward_strategies;
    register_op(bwd);
    register_op_handler(kBackwardOp, backward_handler, false, {.confirms_agreement = true});
  }
};
const Registrar registrar;

}  // namespace
}  // namespace dtensor::conv

namespace dtensor {

namespace {
ConvParams expand_for(const DTensor& input, const ConvParams& params) {
  check_arg(input.spec().ndim() >= 3 && input.spec().ndim() <= 5, "conv",
            "input: expected [N, C, spatial...] with 1 to 3 spatial dims, got shape {}",
            shape_str(input.shape()));
  return params.expanded(input.spec().ndim() - 2);
}

// The front-end's own checks (expand_for) run before dispatch's agreement
// check. A rank whose arguments fail them must not raise alone: the others
// would go on into that agreement check and wait there until the timeout. So
// a failing rank takes part in one agreement check of its own, with its error
// as the fingerprint (agree_before_failing: what dispatch does first, so the
// checks pair up and the call numbers stay in step): every rank raises, with
// the same error when all failed alike and "ranks disagree" otherwise.
std::vector<OpArg> encoded_params_agreed(const DTensor& input, const ConvParams& params,
                                         const char* op) {
  try {
    return conv::encode_params(expand_for(input, params));
  } catch (const InvalidArgument& e) {
    agree_before_failing(input.mesh(), std::hash<std::string>()(e.what()), op, e.what());
    throw;
  }
}
}  // namespace

DTensor convolution(const DTensor& input, const DTensor& weight, const std::optional<DTensor>& bias,
                    const ConvParams& params) {
  std::vector<OpArg> args{input, weight};
  args.push_back(bias ? OpArg(*bias) : OpArg(None{}));
  for (auto& a : encoded_params_agreed(input, params, conv::kForwardOp))
    args.push_back(std::move(a));
  return dispatch(conv::kForwardOp, std::move(args)).at(0);
}

ConvGrads convolution_backward(const DTensor& grad_output, const DTensor& input,
                               const DTensor& weight, const ConvParams& params,
                               const ConvOutputMask& mask) {
  ConvGrads g;
  if (!mask.input && !mask.weight && !mask.bias) return g;
  std::vector<OpArg> args{grad_output, input, weight};
  for (auto& a : encoded_params_agreed(input, params, conv::kBackwardOp))
    args.push_back(std::move(a));
  for (auto& a : conv::encode_mask(mask))
    args.push_back(std::move(a));
  auto outs = dispatch(conv::kBackwardOp, std::move(args));
  std::size_t i = 0;
  if (mask.input) g.grad_input = outs.at(i++);
  if (mask.weight) g.grad_weight = outs.at(i++);
  if (mask.bias) g.grad_bias = outs.at(i++);
  return g;
}

}  // namespace dtensor
