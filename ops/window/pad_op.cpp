// pad (torch.nn.functional.pad on the spatial dims), forward and backward,
// on the window engine: each output position reads one input position (a
// window of extent 1), so the engine's boundary modes are exactly pad's
// modes. Constant padding stops the window at the input's edge and fills the
// rest with the value; reflect, replicate and circular get their padding
// materialised by the engine from whichever ranks own it, and the window IS
// the output. The forward copies the window's tiles (the shard and the
// strips received) straight into the output, and the backward grad_output
// straight into the window's gradient tiles: one copy each, no assembled
// window. The backward returns each output's gradient to the input position
// it was read from.
//
// Argument layout (typed calls, dtensor/ops/typed_call.h):
//   pad: input, padding (l0,r0,...), mode, value;
//   pad_backward: grad_output, input, padding, mode.
#include <array>
#include <optional>

#include <fmt/format.h>

#include "dtensor/core/errors.h"
#include "dtensor/ops/dispatch.h"
#include "dtensor/ops/typed_call.h"
#include "dtensor/ops/window.h"
#include "dtensor/ops/window_ops.h"
#include "ops/autograd/backward_helpers.h"
#include "ops/detail/agreed_front_end.h"
#include "ops/detail/op_pair.h"
#include "ops/window/window_strategies.h"

namespace dtensor {

std::string_view pad_mode_name(PadMode m) {
  switch (m) {
    case PadMode::Constant:
      return "constant";
    case PadMode::Reflect:
      return "reflect";
    case PadMode::Replicate:
      return "replicate";
    case PadMode::Circular:
      return "circular";
  }
  return "?";
}

PaddingMode padding_mode_of(PadMode m) {
  switch (m) {
    case PadMode::Constant:
      break;
    case PadMode::Reflect:
      return PaddingMode::Reflect;
    case PadMode::Replicate:
      return PaddingMode::Replicate;
    case PadMode::Circular:
      return PaddingMode::Circular;
  }
  return PaddingMode::Zeros;
}

/// PadMode by name ("constant", "reflect", ...).
template <>
struct ArgCodec<PadMode>
    : EnumByNameCodec<PadMode, pad_mode_name, PadMode::Constant, PadMode::Reflect,
                      PadMode::Replicate, PadMode::Circular> {};

namespace window {
namespace {

constexpr const char* kPad = "pad";
constexpr const char* kPadBackward = "pad_backward";

// What the forward and the backward call share: the input, the padding and
// the mode, and the window they make.
struct PadGeometry {
  const DTensor& input;
  const ConvParams::Padding& padding;  // expanded
  PadMode mode;

  Boundary boundary() const { return boundary_of(padding_mode_of(mode)); }

  std::vector<WindowDim> dims() const {
    std::vector<WindowDim> out;
    for (std::size_t i = 0; i < padding.size(); ++i) {
      WindowDim d = WindowDim::sliding(1, 1, 1, padding[i].first, padding[i].second, boundary());
      d.output_length = input.shape()[i + 2] + padding[i].first + padding[i].second;
      out.push_back(d);
    }
    return out;
  }

  Shape output_shape() const {
    Shape out = input.shape();
    for (std::size_t i = 0; i < padding.size(); ++i)
      out[i + 2] += padding[i].first + padding[i].second;
    return out;
  }
};

/// A "pad" call: input, padding (l0,r0,...), mode, value.
struct PadCall {
  const DTensor& input;
  ConvParams::Padding padding;  // expanded
  PadMode mode;
  double value;
  using Fields = CallFields<const DTensor&, ConvParams::Padding, PadMode, double>;
  static constexpr Fields::Names names{"input", "padding", "mode", "value"};
  PadGeometry geometry() const { return {input, padding, mode}; }
};

/// A "pad_backward" call: grad_output, then the forward's arguments but the
/// fill value.
struct PadBackwardCall {
  const DTensor& grad_output;
  const DTensor& input;
  ConvParams::Padding padding;
  PadMode mode;
  using Fields = CallFields<const DTensor&, const DTensor&, ConvParams::Padding, PadMode>;
  static constexpr Fields::Names names{"grad_output", "input", "padding", "mode"};
  PadGeometry geometry() const { return {input, padding, mode}; }
};

void check_pad(const PadGeometry& c) {
  const Shape& x = c.input.shape();
  DTENSOR_CHECK_ARG(x.size() >= 3 && x.size() <= 5, kPad,
                    "input: expected [N, C, spatial...] with 1 to 3 spatial dims, got shape {}",
                    shape_str(x));
  DTENSOR_CHECK_ARG(c.padding.size() == x.size() - 2, kPad, "padding: {} pairs for {} spatial dims",
                    c.padding.size(), x.size() - 2);
  for (std::size_t i = 0; i < c.padding.size(); ++i) {
    const auto [l, r] = c.padding[i];
    const std::int64_t L = x[i + 2];
    constexpr std::int64_t kMaxPad = std::int64_t{1} << 40;  // far from overflowing
    check_arg(std::abs(l) <= kMaxPad && std::abs(r) <= kMaxPad, kPad,
              "padding: ({}, {}) is beyond 2^40 in magnitude", l, r);
    if (c.mode == PadMode::Constant) {
      check_arg(L + l + r >= 0, kPad,
                "padding: ({}, {}) on spatial dim {} of length {} gives a negative size", l, r, i,
                L);
      continue;
    }
    DTENSOR_CHECK_ARG(l >= 0 && r >= 0, kPad, "padding: {} padding must be >= 0, got ({}, {})",
                      pad_mode_name(c.mode), l, r);
    // WindowDim checks the mode's own limits (reflect < L, circular <= L).
    c.dims()[i].output_length_for(L);
  }
}

// The box of local outputs that read the input (constant mode), as
// (output offset, window offset, length) per spatial dim; nullopt if empty.
std::optional<std::vector<std::array<std::int64_t, 3>>> inside(const PadGeometry& c,
                                                               const WindowExchange& engine) {
  std::vector<std::array<std::int64_t, 3>> box;
  for (std::size_t i = 0; i < c.padding.size(); ++i) {
    const WindowSpan& s = engine.spans()[i];
    const std::int64_t pl = c.padding[i].first, L = c.input.shape()[i + 2];
    const std::int64_t lo = std::max(s.output.offset, pl);
    const std::int64_t hi = std::min(s.output.end(), L + pl);
    if (hi <= lo) return std::nullopt;
    box.push_back({lo - s.output.offset, lo - pl - s.origin, hi - lo});
  }
  return box;
}

using Box = std::vector<std::array<std::int64_t, 3>>;

// `t` (the output, or the window as tiles: its column `which` of the box)
// cut to the box dim by dim; each slab cut away on the way is handed to
// `outside` (to fill it with the value, or zero it). The slabs span the box's
// extent on the dims before their own, so every position is visited once.
template <class T, class Outside>
T peel_box(T t, const Box& box, int which, Outside outside) {
  for (std::size_t i = 0; i < box.size(); ++i) {
    const auto d = static_cast<std::int64_t>(i) + 2;
    const std::int64_t at = box[i][static_cast<std::size_t>(which)], length = box[i][2];
    const std::int64_t size = t.shape()[static_cast<std::size_t>(d)];
    if (at > 0) outside(t.narrow(d, 0, at));
    if (at + length < size) outside(t.narrow(d, at + length, size - at - length));
    t = t.narrow(d, at, length);
  }
  return t;
}

template <class T>
T narrow_box(T t, const Box& box, int which) {
  return peel_box(std::move(t), box, which, [](const T&) {});
}

std::vector<DTensor> forward(OpCall& call) {
  const PadCall& c = decoded<PadCall>(call.schema());
  auto inputs = call.redistributed_inputs();
  const DTensor& x = inputs[0];
  WindowExchange engine(call, x.spec(), c.geometry().dims());
  // The window as tiles (the shard and the strips received), copied once,
  // straight into the output.
  WindowExchange::Pending pending = engine.post(x.to_local());
  const TiledTensor& window = pending.wait();
  const DTensorSpec& out = call.sharding().output_specs[0];
  Tensor y = Tensor::empty(out.local_shape(), x.dtype(), x.to_local().device());
  if (c.mode != PadMode::Constant) {  // the window is the output
    window.copy_to(y);
    return {DTensor(y, out)};
  }
  // (A Partial input comes here only with value 0: the strategies see to it.)
  const auto box = inside(c.geometry(), engine);
  if (!box) {
    y.fill_(c.value);
    return {DTensor(y, out)};
  }
  // The value only where no input lands: per dim, the slabs before and after
  // the box, across the box's extent on the dims before it.
  narrow_box(window, *box, 1).copy_to(peel_box(y, *box, 0, [&](Tensor slab) {
    slab.fill_(c.value);
  }));
  return {DTensor(y, out)};
}

std::vector<DTensor> backward(OpCall& call) {
  const PadBackwardCall& c = decoded<PadBackwardCall>(call.schema());
  auto inputs = call.redistributed_inputs();
  const DTensor& gy = inputs[0];
  const DTensor& x = inputs[1];
  WindowExchange engine(call, x.spec(), c.geometry().dims());
  // The window's gradient written straight into its tiles (the shard's
  // gradient and the strips going back): one copy of grad_output.
  WindowExchange::Gradient grad = engine.gradient();
  const TiledTensor& window = grad.window();
  if (c.mode != PadMode::Constant) {  // the window is the output
    window.scatter(gy.to_local());
  } else if (const auto box = inside(c.geometry(), engine)) {
    // Zero where no output reads (a negative padding's crop), the rest from
    // grad_output.
    peel_box(window, *box, 1, [](const TiledTensor& slab) {
      slab.zero_();
    }).scatter(narrow_box(gy.to_local(), *box, 0));
  } else {
    window.zero_();
  }
  return {DTensor(grad.finish(), call.sharding().output_specs[0])};
}

struct Registrar {
  Registrar() {
    OpDef fwd;
    fwd.name = kPad;
    fwd.validate = [](const OpSchema& s) { check_pad(decoded<PadCall>(s).geometry()); };
    fwd.output_meta = [](const OpSchema& s) {
      const PadCall& c = decoded<PadCall>(s);
      return std::vector<TensorMeta>{{c.geometry().output_shape(), c.input.dtype()}};
    };
    fwd.strategies = [](const OpSchema& s) {
      const PadCall& c = decoded<PadCall>(s);
      // Padding with a non-zero constant is affine, not linear: a Partial
      // input is reduced first.
      const bool linear = c.mode != PadMode::Constant || c.value == 0;
      return per_channel_strategies(c.input.mesh().ndim(), c.input.spec().ndim(), 1, linear);
    };
    // pad_backward takes the forward's arguments but the fill value.
    fwd.backward = [](const BackwardCall& c) -> std::vector<std::optional<DTensor>> {
      const PadCall& f = decoded<PadCall>(c.forward);
      return {dispatch(kPadBackward,
                       PadBackwardCall::Fields::encode(autograd::detail::grad_of_output(c), f.input,
                                                       f.padding, f.mode))
                  .at(0)};
    };

    OpDef bwd;
    bwd.name = kPadBackward;
    bwd.validate = [](const OpSchema& s) {
      const PadBackwardCall& c = decoded<PadBackwardCall>(s);
      check_pad(c.geometry());
      detail::check_grad_output(kPad, c.grad_output, c.input, c.geometry().output_shape(),
                                "pad's output");
    };
    bwd.output_meta = [](const OpSchema& s) {
      const PadBackwardCall& c = decoded<PadBackwardCall>(s);
      return std::vector<TensorMeta>{{c.input.shape(), c.input.dtype()}};
    };
    bwd.strategies = [](const OpSchema& s) {
      const DTensor& x = s.dtensor(1);
      return per_channel_strategies(x.mesh().ndim(), x.spec().ndim(), 2, false);
    };
    detail::register_op_pair({std::move(fwd), std::move(bwd), forward, backward});
  }
};
const Registrar registrar;

ConvParams::Padding expanded_padding(const DTensor& input, const ConvParams::Padding& padding) {
  const std::int64_t n = input.spec().ndim() - 2;
  DTENSOR_CHECK_ARG(n >= 1 && n <= 3, kPad,
                    "input: expected [N, C, spatial...] with 1 to 3 spatial dims, got shape {}",
                    shape_str(input.shape()));
  if (padding.size() == 1) return ConvParams::Padding(static_cast<std::size_t>(n), padding[0]);
  DTENSOR_CHECK_ARG(static_cast<std::int64_t>(padding.size()) == n, kPad,
                    "padding: {} pairs given for {} spatial dims (give 1 or {})", padding.size(), n,
                    n);
  return padding;
}

}  // namespace
}  // namespace window

DTensor pad(const DTensor& input, const ConvParams::Padding& padding, PadMode mode, double value) {
  const auto p = detail::agreed_front_end(input.mesh(), window::kPad,
                                          [&] { return window::expanded_padding(input, padding); });
  return dispatch(window::kPad, window::PadCall::Fields::encode(input, p, mode, value)).at(0);
}

DTensor pad_backward(const DTensor& grad_output, const DTensor& input,
                     const ConvParams::Padding& padding, PadMode mode) {
  const auto p = detail::agreed_front_end(input.mesh(), window::kPad,
                                          [&] { return window::expanded_padding(input, padding); });
  return dispatch(window::kPadBackward,
                  window::PadBackwardCall::Fields::encode(grad_output, input, p, mode))
      .at(0);
}

}  // namespace dtensor
