// max_pool, avg_pool, adaptive_avg_pool and adaptive_max_pool, forward and
// backward, on the window engine. Each call is decoded once into a PoolCall;
// the engine brings each rank's window (halos from the ranks that own them),
// the local kernels (dtensor/ops/kernels/pool.h) reduce over taps planned in
// global coordinates (pool_taps.h), on the window's tiles where they lie
// (window_bands.h): the forward reads them, the backward writes the
// window's gradient into the tiles that go back to their owners.
// The calls' argument layouts are in pool_call.h.
#include <algorithm>
#include <optional>

#include <fmt/format.h>

#include "dtensor/core/errors.h"
#include "dtensor/ops/dispatch.h"
#include "dtensor/ops/typed_call.h"
#include "dtensor/ops/window.h"
#include "dtensor/ops/window_bands.h"
#include "dtensor/ops/window_ops.h"
#include "ops/detail/agreed_front_end.h"
#include "ops/detail/local_result.h"
#include "ops/detail/op_pair.h"
#include "ops/window/pool_call.h"
#include "ops/window/pool_taps.h"
#include "ops/window/window_strategies.h"

namespace dtensor::window {
namespace {

enum class Reduce { Max, Avg };
enum class WindowShape { Sliding, Adaptive };

struct PoolOp {
  const char* name;
  const char* backward_name;
  Reduce reduce;
  WindowShape shape;
};
constexpr PoolOp kMaxPool{"max_pool", "max_pool_backward", Reduce::Max, WindowShape::Sliding};
constexpr PoolOp kAvgPool{"avg_pool", "avg_pool_backward", Reduce::Avg, WindowShape::Sliding};
constexpr PoolOp kAdaptiveAvg{"adaptive_avg_pool", "adaptive_avg_pool_backward", Reduce::Avg,
                              WindowShape::Adaptive};
constexpr PoolOp kAdaptiveMax{"adaptive_max_pool", "adaptive_max_pool_backward", Reduce::Max,
                              WindowShape::Adaptive};

// What every stage reads of the four call shapes (pool_call.h), decoded
// once per call. Backward calls have grad_output.
struct PoolCall {
  const DTensor* grad_output = nullptr;
  const DTensor& input;
  PoolParams params;                      // sliding (expanded)
  std::vector<std::int64_t> output_size;  // adaptive (expanded)

  static const PoolCall& of(const OpSchema& s, const PoolOp& op, bool backward) {
    return decoded<PoolCall>(s, [&]() -> PoolCall {
      if (op.shape == WindowShape::Adaptive) {
        if (backward) {
          const auto& c = decoded<AdaptivePoolBackwardCall>(s);
          return {&c.grad_output, c.input, {}, c.output_size};
        }
        const auto& c = decoded<AdaptivePoolCall>(s);
        return {nullptr, c.input, {}, c.output_size};
      }
      if (backward) {
        const auto& c = decoded<SlidingPoolBackwardCall>(s);
        return {&c.grad_output, c.input, c.params, {}};
      }
      const auto& c = decoded<SlidingPoolCall>(s);
      return {nullptr, c.input, c.params, {}};
    });
  }

  std::vector<WindowDim> dims(const PoolOp& op) const {
    std::vector<WindowDim> out;
    const Shape& x = input.shape();
    if (op.shape == WindowShape::Adaptive) {
      for (auto o : output_size)
        out.push_back(WindowDim::adaptive(o));
      return out;
    }
    const PoolParams& p = params;
    for (std::size_t i = 0; i < p.kernel.size(); ++i) {
      WindowDim d = WindowDim::sliding(p.kernel[i], p.stride[i], p.dilation[i], p.padding[i].first,
                                       p.padding[i].second);
      d.output_length = pool_output_length(x[i + 2], p.kernel[i], p.stride[i], p.dilation[i],
                                           p.padding[i].first, p.padding[i].second, p.ceil_mode);
      out.push_back(d);
    }
    return out;
  }

  Shape output_shape(const PoolOp& op) const {
    Shape out{input.shape()[0], input.shape()[1]};
    const auto ds = dims(op);
    for (std::size_t i = 0; i < ds.size(); ++i)
      out.push_back(ds[i].output_length_for(input.shape()[i + 2]));
    return out;
  }
};

// PyTorch's checks, each naming its parameter.
void check_pool(const PoolCall& c, const PoolOp& op) {
  const Shape& x = c.input.shape();
  const auto rank = static_cast<std::int64_t>(x.size());
  DTENSOR_CHECK_ARG(rank >= 3 && rank <= 5, op.name,
                    "input: expected [N, C, spatial...] with 1 to 3 spatial dims, got shape {}",
                    shape_str(x));
  const auto spatial = static_cast<std::size_t>(rank - 2);
  if (op.shape == WindowShape::Adaptive) {
    DTENSOR_CHECK_ARG(c.output_size.size() == spatial, op.name,
                      "output_size: {} values for {} spatial dims", c.output_size.size(), spatial);
    for (std::size_t i = 0; i < spatial; ++i) {
      check_arg(c.output_size[i] >= 1, op.name, "output_size: must be >= 1, got {}",
                c.output_size[i]);
      check_arg(x[i + 2] >= 1, op.name,
                "input: spatial dim {} is empty; an adaptive pool needs a non-empty input", i);
    }
    return;
  }
  const PoolParams& p = c.params;
  check_arg(p.kernel.size() == spatial && p.stride.size() == spatial &&
                p.padding.size() == spatial && p.dilation.size() == spatial,
            op.name, "kernel: parameters for {} spatial dims expected", spatial);
  constexpr std::int64_t kMaxParam = std::int64_t{1} << 40;  // far from overflowing
  for (std::size_t i = 0; i < spatial; ++i) {
    check_arg(p.kernel[i] <= kMaxParam && p.stride[i] <= kMaxParam && p.dilation[i] <= kMaxParam,
              op.name, "kernel: kernel, stride and dilation must be at most 2^40");
    check_arg(p.kernel[i] >= 1, op.name, "kernel: must be >= 1, got {}", p.kernel[i]);
    check_arg(p.stride[i] >= 1, op.name, "stride: must be >= 1, got {}", p.stride[i]);
    check_arg(p.dilation[i] >= 1, op.name, "dilation: must be >= 1, got {}", p.dilation[i]);
    if (op.reduce == Reduce::Avg)
      check_arg(p.dilation[i] == 1, op.name, "dilation: avg_pool has no dilation, got {}",
                p.dilation[i]);
    const auto [pl, pr] = p.padding[i];
    // PyTorch's rule: at most half the kernel size (not its dilated extent).
    const std::int64_t half = p.kernel[i] / 2;
    check_arg(pl >= 0 && pr >= 0, op.name, "padding: must be >= 0, got ({}, {})", pl, pr);
    check_arg(pl <= half && pr <= half, op.name,
              "padding: ({}, {}) should be at most half of the kernel size {}", pl, pr,
              p.kernel[i]);
    const std::int64_t o =
        pool_output_length(x[i + 2], p.kernel[i], p.stride[i], p.dilation[i], pl, pr, p.ceil_mode);
    check_arg(o >= 1, op.name,
              "input: spatial dim {} of length {} gives an empty output (kernel {}, stride {}, "
              "padding ({}, {}), dilation {})",
              i, x[i + 2], p.kernel[i], p.stride[i], pl, pr, p.dilation[i]);
  }
  if (p.divisor_override)
    check_arg(*p.divisor_override != 0, op.name, "divisor_override: must not be zero");
}

std::vector<PoolTaps> taps_of(const WindowExchange& engine, const std::vector<WindowDim>& dims,
                              const Shape& input) {
  std::vector<PoolTaps> out;
  for (std::size_t i = 0; i < dims.size(); ++i)
    out.push_back(pool_taps(dims[i], input[i + 2], engine.spans()[i]));
  return out;
}

AvgDivisor divisor_of(const PoolCall& c, const PoolOp& op) {
  if (op.shape == WindowShape::Adaptive) return {true, std::nullopt};
  return {c.params.count_include_pad, c.params.divisor_override};
}

// What each output reads, per dim (window_bands.h).
std::vector<OutputReads> reads_of(const std::vector<PoolTaps>& taps) {
  std::vector<OutputReads> out(taps.size());
  for (std::size_t i = 0; i < taps.size(); ++i)
    for (const auto& t : taps[i].taps) {
      const bool none = t.empty();
      out[i].first.push_back(none ? 0 : *std::min_element(t.begin(), t.end()));
      out[i].last.push_back(none ? -1 : *std::max_element(t.begin(), t.end()));
    }
  return out;
}

// The taps of a box of bands' outputs, over the piece of the window it reads.
std::vector<PoolTaps> band_taps(const std::vector<PoolTaps>& taps,
                                const std::vector<WindowBand>& box) {
  std::vector<PoolTaps> out(taps.size());
  for (std::size_t i = 0; i < taps.size(); ++i)
    for (auto o = static_cast<std::size_t>(box[i].out_begin);
         o < static_cast<std::size_t>(box[i].out_end); ++o) {
      auto& t = out[i].taps.emplace_back(taps[i].taps[o]);
      for (auto& w : t)
        w -= box[i].win_begin;
      if (o < taps[i].padded_size.size()) out[i].padded_size.push_back(taps[i].padded_size[o]);
    }
  return out;
}

std::vector<DTensor> forward(OpCall& call, const PoolOp& op) {
  const PoolCall& c = PoolCall::of(call.schema(), op, false);
  auto inputs = call.redistributed_inputs();
  const DTensor& x = inputs[0];
  const auto dims = c.dims(op);
  WindowExchange engine(call, x.spec(), dims);
  // The window as tiles, read where they lie (window_bands.h).
  WindowExchange::Pending pending = engine.post(x.to_local());
  const TiledTensor& window = pending.wait();
  const auto taps = taps_of(engine, dims, x.shape());
  Tensor y = Tensor::empty(kernels::pool_output_shape(window.shape(), taps), window.dtype(),
                           window.device());
  const DeviceType device = window.device().type;
  for_each_window_band(window, reads_of(taps),
                       [&](const Tensor& piece, const std::vector<WindowBand>& box) {
                         const Tensor out = band_outputs(y, box);
                         if (op.reduce == Reduce::Max) {
                           run_kernel(kernels::kMaxPoolForward, device, piece.dtype(),
                                      {piece, band_taps(taps, box), out});
                         } else {
                           run_kernel(kernels::kAvgPoolForward, device, piece.dtype(),
                                      {piece, band_taps(taps, box), divisor_of(c, op), out});
                         }
                       });
  return {detail::wrap_checked(y, call.sharding().output_specs[0], op.name)};
}

std::vector<DTensor> backward(OpCall& call, const PoolOp& op) {
  const PoolCall& c = PoolCall::of(call.schema(), op, true);
  auto inputs = call.redistributed_inputs();
  const DTensor& gy = inputs[0];
  const DTensor& x = inputs[1];
  const auto dims = c.dims(op);
  WindowExchange engine(call, x.spec(), dims);
  const auto taps = taps_of(engine, dims, x.shape());
  const Tensor grad_output = gy.to_local();
  const DeviceType device = grad_output.device().type;
  // max_pool needs the window's values (which tap each output picked), as
  // tiles; avg_pool only where the window lies.
  std::optional<WindowExchange::Pending> values;
  if (op.reduce == Reduce::Max) values.emplace(engine.post(x.to_local()));
  const TiledTensor* window = values ? &values->wait() : nullptr;
  // The window's gradient, band by band, straight into its tiles (the
  // shard's gradient and the strips going back). max_pool writes a tile in
  // place only where the window's values for the box lie alike in memory
  // (kernels::same_layout); elsewhere through a buffer.
  WindowExchange::Gradient grad = engine.gradient();
  const auto values_alike = [&](const Tensor& tile, const std::vector<WindowBand>& box) {
    const TiledTensor read = window_part(*window, box);
    return read.is_whole() && kernels::same_layout(read.tiles().front().data, tile);
  };
  add_window_gradient(
      grad.window(), reads_of(taps),
      [&](const Tensor& dst, const std::vector<WindowBand>& box) {
        const Tensor gy_band = band_outputs(grad_output, box);
        if (op.reduce == Reduce::Max) {
          Tensor piece = assembled(window_part(*window, box));
          if (!kernels::same_layout(piece, dst)) piece = piece.contiguous();  // dst: a buffer
          run_kernel(kernels::kMaxPoolBackward, device, dst.dtype(),
                     {piece, gy_band, band_taps(taps, box), dst, true});
        } else {
          run_kernel(kernels::kAvgPoolBackward, device, dst.dtype(),
                     {gy_band, band_taps(taps, box), divisor_of(c, op), dst, true});
        }
      },
      window ? std::function<bool(const Tensor&, const std::vector<WindowBand>&)>(values_alike)
             : nullptr);
  return {detail::wrap_checked(grad.finish(), call.sharding().output_specs[0], op.name)};
}

void register_pool(const PoolOp& op) {
  OpDef fwd;
  fwd.name = op.name;
  fwd.validate = [op](const OpSchema& s) { check_pool(PoolCall::of(s, op, false), op); };
  fwd.output_meta = [op](const OpSchema& s) {
    const PoolCall& c = PoolCall::of(s, op, false);
    return std::vector<TensorMeta>{{c.output_shape(op), c.input.dtype()}};
  };
  fwd.strategies = [op](const OpSchema& s) {
    const DTensor& x = s.dtensor(0);
    return per_channel_strategies(x.mesh().ndim(), x.spec().ndim(), 1, op.reduce == Reduce::Avg);
  };

  OpDef bwd;
  bwd.name = op.backward_name;
  bwd.validate = [op](const OpSchema& s) {
    const PoolCall& c = PoolCall::of(s, op, true);
    check_pool(c, op);
    detail::check_grad_output(op.name, *c.grad_output, c.input, c.output_shape(op),
                              "the pool's output");
  };
  bwd.output_meta = [op](const OpSchema& s) {
    const PoolCall& c = PoolCall::of(s, op, true);
    return std::vector<TensorMeta>{{c.input.shape(), c.input.dtype()}};
  };
  bwd.strategies = [](const OpSchema& s) {
    const DTensor& x = s.dtensor(1);
    return per_channel_strategies(x.mesh().ndim(), x.spec().ndim(), 2, false);
  };
  detail::register_op_pair({std::move(fwd), std::move(bwd),
                            [op](OpCall& call) { return forward(call, op); },
                            [op](OpCall& call) { return backward(call, op); }});
}

struct Registrar {
  Registrar() {
    for (const PoolOp* op : {&kMaxPool, &kAvgPool, &kAdaptiveAvg, &kAdaptiveMax})
      register_pool(*op);
  }
};
const Registrar registrar;

std::int64_t spatial_dims_of(const DTensor& x, const char* op) {
  const std::int64_t n = x.spec().ndim() - 2;
  DTENSOR_CHECK_ARG(n >= 1 && n <= 3, op,
                    "input: expected [N, C, spatial...] with 1 to 3 spatial dims, got shape {}",
                    shape_str(x.shape()));
  return n;
}

DTensor sliding(const PoolOp& op, const DTensor* grad_output, const DTensor& input,
                const PoolParams& params) {
  const PoolParams p = detail::agreed_front_end(
      input.mesh(), op.name, [&] { return params.expanded(spatial_dims_of(input, op.name)); });
  if (grad_output)
    return dispatch(op.backward_name,
                    SlidingPoolBackwardCall::Fields::encode(*grad_output, input, p))
        .at(0);
  return dispatch(op.name, SlidingPoolCall::Fields::encode(input, p)).at(0);
}

DTensor adaptive(const PoolOp& op, const DTensor* grad_output, const DTensor& input,
                 const std::vector<std::int64_t>& output_size) {
  const IntList sizes = detail::agreed_front_end(input.mesh(), op.name, [&] {
    const std::int64_t n = spatial_dims_of(input, op.name);
    if (output_size.size() == 1) return IntList(static_cast<std::size_t>(n), output_size[0]);
    DTENSOR_CHECK_ARG(static_cast<std::int64_t>(output_size.size()) == n, op.name,
                      "output_size: {} values for {} spatial dims (give 1 or {})",
                      output_size.size(), n, n);
    return IntList(output_size);
  });
  if (grad_output)
    return dispatch(op.backward_name,
                    AdaptivePoolBackwardCall::Fields::encode(*grad_output, input, sizes))
        .at(0);
  return dispatch(op.name, AdaptivePoolCall::Fields::encode(input, sizes)).at(0);
}

}  // namespace
}  // namespace dtensor::window

namespace dtensor {

using window::adaptive;
using window::sliding;

DTensor max_pool(const DTensor& input, const PoolParams& params) {
  return sliding(window::kMaxPool, nullptr, input, params);
}
DTensor max_pool_backward(const DTensor& grad_output, const DTensor& input,
                          const PoolParams& params) {
  return sliding(window::kMaxPool, &grad_output, input, params);
}
DTensor avg_pool(const DTensor& input, const PoolParams& params) {
  return sliding(window::kAvgPool, nullptr, input, params);
}
DTensor avg_pool_backward(const DTensor& grad_output, const DTensor& input,
                          const PoolParams& params) {
  return sliding(window::kAvgPool, &grad_output, input, params);
}
DTensor adaptive_avg_pool(const DTensor& input, const std::vector<std::int64_t>& output_size) {
  return adaptive(window::kAdaptiveAvg, nullptr, input, output_size);
}
DTensor adaptive_avg_pool_backward(const DTensor& grad_output, const DTensor& input,
                                   const std::vector<std::int64_t>& output_size) {
  return adaptive(window::kAdaptiveAvg, &grad_output, input, output_size);
}
DTensor adaptive_max_pool(const DTensor& input, const std::vector<std::int64_t>& output_size) {
  return adaptive(window::kAdaptiveMax, nullptr, input, output_size);
}
DTensor adaptive_max_pool_backward(const DTensor& grad_output, const DTensor& input,
                                   const std::vector<std::int64_t>& output_size) {
  return adaptive(window::kAdaptiveMax, &grad_output, input, output_size);
}

}  // namespace dtensor
