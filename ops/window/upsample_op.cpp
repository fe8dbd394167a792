// upsample (F.interpolate), nearest and linear, forward and backward, on the
// window engine. Each call is decoded once into an UpsampleCall; the engine
// brings each rank's window (the inputs its outputs read, from the ranks
// that own them: WindowDim::Kind::Resample), resample_taps.h plans which
// window positions each local output reads in global coordinates, the
// kernels (dtensor/ops/kernels/upsample.h) interpolate over them (the
// forward reads the window's tiles where they lie, window_bands.h), and the
// backward writes the window's gradient into the tiles that go back to its
// owners.
//
// Argument layouts (docs/operators.md), the typed calls below:
//   upsample:          input, mode ("nearest" | "linear"), output_size (one per
//                      spatial dim), align_corners, scale_0, ..., scale_{n-1}
//                      (doubles; 0: none, the scale is L / O)
//   upsample_backward: grad_output, then the same
#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "dtensor/core/errors.h"
#include "dtensor/ops/dispatch.h"
#include "dtensor/ops/kernels/upsample.h"
#include "dtensor/ops/typed_call.h"
#include "dtensor/ops/upsample.h"
#include "dtensor/ops/window.h"
#include "dtensor/ops/window_bands.h"
#include "ops/detail/agreed_front_end.h"
#include "ops/detail/local_result.h"
#include "ops/detail/op_pair.h"
#include "ops/detail/placed_like_input.h"
#include "ops/window/resample_taps.h"
#include "ops/window/upsample_geometry.h"
#include "ops/window/window_strategies.h"

namespace dtensor {

/// The mode by name: "nearest" | "linear".
template <>
struct ArgCodec<UpsampleMode> : EnumByNameCodec<UpsampleMode, upsample_mode_name,
                                                UpsampleMode::Nearest, UpsampleMode::Linear> {};

}  // namespace dtensor

namespace dtensor::window {
namespace {

constexpr const char* kOp = "upsample";
constexpr const char* kBackward = "upsample_backward";

/// An "upsample" call.
struct ForwardCall {
  const DTensor& input;
  UpsampleMode mode;
  IntList output_size;
  bool align_corners;
  ArgTail<double> scales;
  using Fields = CallFields<const DTensor&, UpsampleMode, IntList, bool, ArgTail<double>>;
  static constexpr Fields::Names names{"input", "mode", "output_size", "align_corners",
                                       "scale_factor"};
};

/// An "upsample_backward" call.
struct BackwardCall {
  const DTensor& grad_output;
  const DTensor& input;
  UpsampleMode mode;
  IntList output_size;
  bool align_corners;
  ArgTail<double> scales;
  using Fields =
      CallFields<const DTensor&, const DTensor&, UpsampleMode, IntList, bool, ArgTail<double>>;
  static constexpr Fields::Names names{"grad_output", "input",         "mode",
                                       "output_size", "align_corners", "scale_factor"};
};

// What every stage reads of either call, decoded once per call.
struct UpsampleCall {
  const DTensor* grad_output = nullptr;
  const DTensor& input;
  bool linear = false;
  IntList output_size;
  bool align_corners = false;
  std::vector<double> scales;

  static const UpsampleCall& of(const OpSchema& s, bool backward) {
    return decoded<UpsampleCall>(s, [&]() -> UpsampleCall {
      if (backward) {
        const auto& c = decoded<BackwardCall>(s);
        return {&c.grad_output, c.input,         c.mode == UpsampleMode::Linear,
                c.output_size,  c.align_corners, c.scales};
      }
      const auto& c = decoded<ForwardCall>(s);
      return {nullptr,       c.input,         c.mode == UpsampleMode::Linear,
              c.output_size, c.align_corners, c.scales};
    });
  }

  std::vector<WindowDim> dims() const {
    std::vector<WindowDim> out;
    for (std::size_t i = 0; i < output_size.size(); ++i)
      out.push_back(resample_dim({output_size, scales}, i, linear, align_corners));
    return out;
  }

  Shape output_shape() const {
    Shape out{input.shape()[0], input.shape()[1]};
    out.insert(out.end(), output_size.begin(), output_size.end());
    return out;
  }
};

void check_upsample(const UpsampleCall& c) {
  const Shape& x = c.input.shape();
  const auto rank = static_cast<std::int64_t>(x.size());
  DTENSOR_CHECK_ARG(rank >= 3 && rank <= 5, kOp,
                    "input: expected [N, C, spatial...] with 1 to 3 spatial dims, got shape {}",
                    shape_str(x));
  const auto spatial = static_cast<std::size_t>(rank - 2);
  DTENSOR_CHECK_ARG(c.output_size.size() == spatial, kOp,
                    "output_size: {} values for {} spatial dims", c.output_size.size(), spatial);
  DTENSOR_CHECK_ARG(c.scales.size() == spatial, kOp, "scale_factor: {} values for {} spatial dims",
                    c.scales.size(), spatial);
  check_arg(c.linear || !c.align_corners, kOp,
            "align_corners: only the linear modes take align_corners");
  for (std::size_t i = 0; i < spatial; ++i) {
    check_arg(x[i + 2] >= 1 && c.output_size[i] >= 1, kOp,
              "input: input and output sizes should be greater than 0, but got input {} and "
              "output {} along spatial dim {}",
              x[i + 2], c.output_size[i], i);
    check_arg(std::isfinite(c.scales[i]) && c.scales[i] >= 0, kOp,
              "scale_factor: must be positive (0: none), got {}", c.scales[i]);
  }
}

std::vector<kernels::ResampleTaps> taps_of(const WindowExchange& engine,
                                           const std::vector<WindowDim>& dims, const Shape& input,
                                           bool backward) {
  std::vector<kernels::ResampleTaps> out;
  for (std::size_t i = 0; i < dims.size(); ++i)
    out.push_back(resample_taps(dims[i], input[i + 2], engine.spans()[i], backward));
  return out;
}

// What each output reads, per dim (window_bands.h).
std::vector<OutputReads> reads_of(const std::vector<kernels::ResampleTaps>& taps) {
  std::vector<OutputReads> out(taps.size());
  for (std::size_t i = 0; i < taps.size(); ++i)
    for (std::size_t o = 0; o < taps[i].i0.size(); ++o) {
      const std::int64_t a = taps[i].i0[o], b = taps[i].taps == 2 ? taps[i].i1[o] : a;
      out[i].first.push_back(std::min(a, b));
      out[i].last.push_back(std::max(a, b));
    }
  return out;
}

// The taps of a box of bands' outputs, over the piece of the window it reads.
std::vector<kernels::ResampleTaps> band_taps(const std::vector<kernels::ResampleTaps>& taps,
                                             const std::vector<WindowBand>& box) {
  std::vector<kernels::ResampleTaps> out(taps.size());
  for (std::size_t i = 0; i < taps.size(); ++i) {
    const kernels::ResampleTaps& t = taps[i];
    kernels::ResampleTaps& b = out[i];
    b.taps = t.taps;
    const auto o0 = static_cast<std::size_t>(box[i].out_begin);
    const auto o1 = static_cast<std::size_t>(box[i].out_end);
    for (std::size_t o = o0; o < o1; ++o) {
      b.i0.push_back(t.i0[o] - box[i].win_begin);
      b.w0.push_back(t.w0[o]);
      if (t.taps == 2) {
        b.i1.push_back(t.i1[o] - box[i].win_begin);
        b.w1.push_back(t.w1[o]);
      }
    }
  }
  return out;
}

std::vector<DTensor> forward(OpCall& call) {
  const UpsampleCall& c = UpsampleCall::of(call.schema(), false);
  auto inputs = call.redistributed_inputs();
  const DTensor& x = inputs[0];
  const auto dims = c.dims();
  WindowExchange engine(call, x.spec(), dims);
  // The window as tiles, read where they lie (window_bands.h).
  WindowExchange::Pending pending = engine.post(x.to_local());
  const TiledTensor& window = pending.wait();
  const auto taps = taps_of(engine, dims, x.shape(), false);
  Tensor y = Tensor::empty(kernels::resample_output_shape(window.shape(), taps), window.dtype(),
                           window.device());
  for_each_window_band(window, reads_of(taps),
                       [&](const Tensor& piece, const std::vector<WindowBand>& box) {
                         const Tensor out = band_outputs(y, box);
                         run_kernel(kernels::kUpsampleForward, piece.device().type, piece.dtype(),
                                    {piece, band_taps(taps, box), out});
                       });
  return {detail::wrap_checked(y, call.sharding().output_specs[0], kOp)};
}

std::vector<DTensor> backward(OpCall& call) {
  const UpsampleCall& c = UpsampleCall::of(call.schema(), true);
  auto inputs = call.redistributed_inputs();
  const DTensor& gy = inputs[0];
  const DTensor& x = inputs[1];
  const auto dims = c.dims();
  WindowExchange engine(call, x.spec(), dims);
  const auto taps = taps_of(engine, dims, x.shape(), true);
  const Tensor grad_output = gy.to_local();
  // The window's gradient, band by band, straight into its tiles (the
  // shard's gradient and the strips going back).
  WindowExchange::Gradient grad = engine.gradient();
  add_window_gradient(
      grad.window(), reads_of(taps), [&](const Tensor& dst, const std::vector<WindowBand>& box) {
        run_kernel(kernels::kUpsampleBackward, dst.device().type, dst.dtype(),
                   {band_outputs(grad_output, box), band_taps(taps, box), dst, true});
      });
  return {detail::wrap_checked(grad.finish(), call.sharding().output_specs[0], kOp)};
}

struct Registrar {
  Registrar() {
    OpDef fwd;
    fwd.name = kOp;
    fwd.validate = [](const OpSchema& s) { check_upsample(UpsampleCall::of(s, false)); };
    fwd.output_meta = [](const OpSchema& s) {
      const UpsampleCall& c = UpsampleCall::of(s, false);
      return std::vector<TensorMeta>{{c.output_shape(), c.input.dtype()}};
    };
    // Linear in the input: a Partial input passes through.
    fwd.strategies = [](const OpSchema& s) {
      const DTensor& x = s.dtensor(0);
      return per_channel_strategies(x.mesh().ndim(), x.spec().ndim(), 1, true);
    };

    OpDef bwd;
    bwd.name = kBackward;
    bwd.validate = [](const OpSchema& s) {
      const UpsampleCall& c = UpsampleCall::of(s, true);
      check_upsample(c);
      detail::check_grad_output(kOp, *c.grad_output, c.input, c.output_shape(),
                                "upsample's output");
    };
    bwd.output_meta = [](const OpSchema& s) {
      const UpsampleCall& c = UpsampleCall::of(s, true);
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

DTensor run(const DTensor* grad_output, const DTensor& input, const UpsampleParams& params) {
  const ExpandedUpsample e = detail::agreed_front_end(
      input.mesh(), kOp, [&] { return expand_upsample(input.shape(), params); });
  if (grad_output)
    return dispatch(kBackward,
                    BackwardCall::Fields::encode(*grad_output, input, params.mode, e.output_size,
                                                 params.align_corners, e.scales))
        .at(0);
  return dispatch(kOp, ForwardCall::Fields::encode(input, params.mode, e.output_size,
                                                   params.align_corners, e.scales))
      .at(0);
}

}  // namespace

ExpandedUpsample expand_upsample(const Shape& x, const UpsampleParams& p) {
  const auto n = static_cast<std::int64_t>(x.size()) - 2;
  DTENSOR_CHECK_ARG(n >= 1 && n <= 3, kOp,
                    "input: expected [N, C, spatial...] with 1 to 3 spatial dims, got shape {}",
                    shape_str(x));
  check_arg(p.size.empty() != p.scale_factor.empty(), kOp,
            "size: give exactly one of size and scale_factor");
  check_arg(p.mode == UpsampleMode::Linear || !p.align_corners, kOp,
            "align_corners: only the linear modes take align_corners");
  ExpandedUpsample e;
  const auto un = static_cast<std::size_t>(n);
  if (!p.size.empty()) {
    DTENSOR_CHECK_ARG(p.size.size() == 1 || p.size.size() == un, kOp,
                      "size: {} values for {} spatial dims (give 1 or {})", p.size.size(), n, n);
    for (std::size_t i = 0; i < un; ++i)
      e.output_size.push_back(p.size.size() == 1 ? p.size[0] : p.size[i]);
    e.scales.assign(un, 0.0);
  } else {
    DTENSOR_CHECK_ARG(p.scale_factor.size() == 1 || p.scale_factor.size() == un, kOp,
                      "scale_factor: {} values for {} spatial dims (give 1 or {})",
                      p.scale_factor.size(), n, n);
    for (std::size_t i = 0; i < un; ++i) {
      const double sf = p.scale_factor.size() == 1 ? p.scale_factor[0] : p.scale_factor[i];
      check_arg(std::isfinite(sf) && sf > 0, kOp, "scale_factor: must be positive, got {}", sf);
      e.scales.push_back(sf);
      e.output_size.push_back(
          static_cast<std::int64_t>(std::floor(static_cast<double>(x[i + 2]) * sf)));
    }
  }
  for (std::size_t i = 0; i < un; ++i)
    check_arg(x[i + 2] >= 1 && e.output_size[i] >= 1, kOp,
              "input: input and output sizes should be greater than 0, but got input {} and "
              "output {} along spatial dim {}",
              x[i + 2], e.output_size[i], i);
  return e;
}

WindowDim resample_dim(const ExpandedUpsample& e, std::size_t d, bool linear, bool align_corners) {
  return WindowDim::resample(e.output_size.at(d), linear, align_corners,
                             d < e.scales.size() ? e.scales[d] : 0.0);
}

}  // namespace dtensor::window

namespace dtensor {

std::string_view upsample_mode_name(UpsampleMode m) {
  return m == UpsampleMode::Nearest ? "nearest" : "linear";
}

std::string UpsampleParams::str() const {
  return fmt::format("mode={} size=[{}] scale_factor=[{}] align_corners={}",
                     upsample_mode_name(mode), fmt::join(size, ", "), fmt::join(scale_factor, ", "),
                     align_corners);
}

Shape upsample_output_shape(const Shape& input, const UpsampleParams& params) {
  const auto e = window::expand_upsample(input, params);
  Shape out{input[0], input[1]};
  out.insert(out.end(), e.output_size.begin(), e.output_size.end());
  return out;
}

DTensor upsample(const DTensor& input, const UpsampleParams& params) {
  return window::run(nullptr, input, params);
}

DTensor upsample_backward(const DTensor& grad_output, const DTensor& input,
                          const UpsampleParams& params) {
  return detail::placed_like_input(window::run(&grad_output, input, params), input);
}

}  // namespace dtensor
