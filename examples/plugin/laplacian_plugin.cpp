// An example plugin on the window engine: `example::laplacian(x, boundary)`,
// the discrete Laplacian over the spatial dims of x = [N, C, spatial...]
// (1 to 3 spatial dims: the 3-, 5- and 7-point stencils),
//
//   y[i] = sum over spatial dims d of  x[i - e_d] - 2 x[i] + x[i + e_d],
//
// where a neighbour outside the input is given by the boundary mode: "zeros"
// (the default), "reflect", "replicate" or "circular" (dtensor::Boundary).
// And its gradient, `example::laplacian_backward(grad_output, x, boundary)`.
//
// Argument layout:  example::laplacian:           input, boundary (text, optional)
//                   example::laplacian_backward:  grad_output, input, boundary (optional)
// Call it as
//   auto y = dtensor::dispatch("example::laplacian", {x, std::string("reflect")}).at(0);
//
// Everything distributed is the engine's (dtensor/ops/window.h): each
// spatial dim is a window of 3 taps, stride 1, padding 1 on each side
// (WindowDim::sliding(3, 1, 1, 1, 1, boundary)), so the output has the
// input's shape and is sharded like it. On a sharded dim WindowExchange
// brings each rank's window (its shard plus one halo row on each side, from
// whichever ranks own them, corners included) as tiles: the shard itself and
// the rows received. for_each_window_band (dtensor/ops/window_bands.h) runs
// the loops below on those tiles where they lie: the outputs that read only
// the shard on a view of it, the few next to a received row on those
// positions copied; the loops only see a tensor (any strides) and the
// global coordinates of its first element. With Boundary::Zeros the window
// stops at the input's edges and the loop skips taps outside [0, L); with
// the other modes the engine materialises the padding and every tap lies
// inside the window.
//
// The backward is the adjoint, written the way every window operator's is:
// each output's gradient spreads +1 / -2 / +1 onto the window positions it
// read, box by box straight into the tiles of WindowExchange::gradient
// (add_window_gradient: the shard's gradient and the strips going back),
// and the engine sums the strips onto the ranks that own each position
// (reflected, replicated or wrapped padding goes back to the element it
// copied).
//
// It includes only installed public headers. Build it as a shared library
// linking dtensor::dtensor and load it on every rank with
// dtensor::load_plugin("libdtensor_example_laplacian.so").
#include <dtensor/dtensor.h>
#include <dtensor/ops/window.h>
#include <dtensor/ops/window_bands.h>

#include <array>
#include <functional>

namespace {

using namespace dtensor;

constexpr const char* kForward = "example::laplacian";
constexpr const char* kBackward = "example::laplacian_backward";
constexpr const char* kComponent = "example";

Boundary parse_boundary(const std::string& text) {
  for (Boundary b : {Boundary::Zeros, Boundary::Reflect, Boundary::Replicate, Boundary::Circular})
    if (boundary_name(b) == text) return b;
  throw InvalidArgument(kComponent, fmt::format("{}: boundary: unknown mode '{}' (zeros, reflect, "
                                                "replicate or circular)",
                                                kForward, text));
}

// One decoded call: grad_output (backward only), input, boundary.
struct LaplacianCall {
  const DTensor* grad_output = nullptr;
  const DTensor& input;
  Boundary boundary = Boundary::Zeros;

  static LaplacianCall decode(const OpSchema& s, bool backward) {
    const std::size_t at = backward ? 1 : 0;
    const Boundary b = s.size() > at + 1 ? parse_boundary(s.text(at + 1)) : Boundary::Zeros;
    return {backward ? &s.dtensor(0) : nullptr, s.dtensor(at), b};
  }

  std::int64_t spatial_dims() const { return input.spec().ndim() - 2; }

  std::vector<WindowDim> dims() const {
    return std::vector<WindowDim>(static_cast<std::size_t>(spatial_dims()),
                                  WindowDim::sliding(3, 1, 1, 1, 1, boundary));
  }
};

void check_call(const LaplacianCall& c) {
  const Shape& x = c.input.shape();
  check_arg(x.size() >= 3 && x.size() <= 5, kComponent,
            "{}: input: expected [N, C, spatial...] with 1 to 3 spatial dims, got shape {}",
            kForward, shape_str(x));
  const DType dt = c.input.dtype();
  check_arg(dt == DType::F32 || dt == DType::F64, kComponent,
            "{}: input: {} is not supported (f32 or f64)", kForward, dtype_name(dt));
  check_arg(c.input.mesh().device_type() == DeviceType::CPU, kComponent,
            "{}: input: the example kernels run on CPU tensors only", kForward);
  // The engine's own checks, each naming its parameter: reflect needs L >= 2,
  // the other modes L >= 1.
  const auto dims = c.dims();
  for (std::size_t i = 0; i < dims.size(); ++i)
    dims[i].output_length_for(x[i + 2]);
  if (c.grad_output) {
    check_arg(c.grad_output->shape() == x, kComponent,
              "{}: grad_output: shape {} but the output is {}", kBackward,
              shape_str(c.grad_output->shape()), shape_str(x));
    check_arg(c.grad_output->dtype() == dt, kComponent,
              "{}: grad_output: dtype {} differs from the input's {}", kBackward,
              dtype_name(c.grad_output->dtype()), dtype_name(dt));
  }
}

// Per mesh dim one of S(0) (batch), S(1) (channel), S(d >= 2) (spatial: the
// engine's halo) or Replicate, the same for every input and the output, and
// never one tensor dim on two mesh dims (a window plan is per dim).
std::vector<ShardingStrategy> strategies(std::int64_t mesh_ndim, std::int64_t ndim,
                                         std::size_t inputs) {
  std::vector<Placement> rows;
  for (std::int64_t d = 0; d < ndim; ++d)
    rows.push_back(Shard(d));
  rows.push_back(Replicate());
  std::vector<ShardingStrategy> out;
  Placements pick;
  std::function<void()> expand = [&] {
    if (static_cast<std::int64_t>(pick.size()) == mesh_ndim) {
      out.push_back({std::vector<Placements>(inputs, pick), {pick}});
      return;
    }
    for (const Placement& p : rows) {
      bool taken = false;
      for (const Placement& q : pick)
        taken = taken || (p.is_shard() && q.is_shard() && p.dim() == q.dim());
      if (taken) continue;
      pick.push_back(p);
      expand();
      pick.pop_back();
    }
  };
  expand();
  return out;
}

// Where this rank's outputs and window lie, padded to 3 spatial dims (an
// absent dim has length 1 and no taps).
struct Geometry {
  std::int64_t spatial = 0;
  std::array<std::int64_t, 3> length{1, 1, 1};   // global input (= output) length L
  std::array<std::int64_t, 3> out_off{0, 0, 0};  // first global output of this rank
  std::array<std::int64_t, 3> out_len{1, 1, 1};
  std::array<std::int64_t, 3> origin{0, 0, 0};  // global position of window element 0
  std::array<std::int64_t, 3> win_len{1, 1, 1};
  // Window element strides: contiguous, or the strides of the piece of the
  // window a band reads (band()).
  std::array<std::int64_t, 3> win_stride{0, 0, 0};
  bool clipped = false;  // Boundary::Zeros: taps outside [0, L) read zero

  Geometry(const WindowExchange& engine, const Shape& global, Boundary boundary)
      : spatial(static_cast<std::int64_t>(engine.spans().size())),
        clipped(boundary == Boundary::Zeros) {
    for (std::size_t d = 0; d < engine.spans().size(); ++d) {
      const WindowSpan& s = engine.spans()[d];
      length[d] = global[d + 2];
      out_off[d] = s.output.offset;
      out_len[d] = s.output.length;
      origin[d] = s.origin;
      win_len[d] = s.length;
      if (s.output.length == 0) continue;
      // Every tap the outputs read must lie in the window.
      const std::int64_t first =
          clipped ? std::max<std::int64_t>(s.output.offset - 1, 0) : s.output.offset - 1;
      const std::int64_t last = clipped ? std::min(s.output.end(), length[d] - 1) : s.output.end();
      check_arg(s.origin <= first && last < s.origin + s.length, kComponent,
                "{}: internal: window [{}, {}) does not cover the taps [{}, {}]", kForward,
                s.origin, s.origin + s.length, first, last);
    }
    win_stride = {win_len[1] * win_len[2], win_len[2], 1};
  }

  // What each output reads of the window, per spatial dim: its neighbours
  // (clipped to [0, L) with zero padding), in window positions.
  std::vector<OutputReads> reads() const {
    std::vector<OutputReads> out(static_cast<std::size_t>(spatial));
    for (std::size_t d = 0; d < out.size(); ++d)
      for (std::int64_t o = out_off[d]; o < out_off[d] + out_len[d]; ++o) {
        const std::int64_t first = clipped ? std::max<std::int64_t>(o - 1, 0) : o - 1;
        const std::int64_t last = clipped ? std::min(o + 1, length[d] - 1) : o + 1;
        out[d].first.push_back(first - origin[d]);
        out[d].last.push_back(last - origin[d]);
      }
    return out;
  }

  // The same cut to a box of bands: its outputs, and the piece of the window
  // they read (any strides).
  Geometry band(const std::vector<WindowBand>& box, const Tensor& piece) const {
    Geometry g = *this;
    for (std::size_t d = 0; d < box.size(); ++d) {
      g.out_off[d] += box[d].out_begin;
      g.out_len[d] = box[d].out_end - box[d].out_begin;
      g.origin[d] += box[d].win_begin;
      g.win_len[d] = piece.size(static_cast<std::int64_t>(d) + 2);
      g.win_stride[d] = piece.stride(static_cast<std::int64_t>(d) + 2);
    }
    return g;
  }

  std::int64_t outputs_per_plane() const { return out_len[0] * out_len[1] * out_len[2]; }
  std::int64_t window_per_plane() const { return win_len[0] * win_len[1] * win_len[2]; }

  // Visits every (output index in the rank's output, window index, weight)
  // of the stencil, for one [N, C] plane.
  template <typename F>
  void for_each_tap(F&& f) const {
    constexpr std::array<std::int64_t, 3> kOffsets{-1, 0, 1};
    constexpr std::array<double, 3> kWeights{1.0, -2.0, 1.0};
    for (std::int64_t o0 = 0; o0 < out_len[0]; ++o0)
      for (std::int64_t o1 = 0; o1 < out_len[1]; ++o1)
        for (std::int64_t o2 = 0; o2 < out_len[2]; ++o2) {
          const std::int64_t out_index = (o0 * out_len[1] + o1) * out_len[2] + o2;
          const std::array<std::int64_t, 3> g{out_off[0] + o0, out_off[1] + o1, out_off[2] + o2};
          for (std::int64_t d = 0; d < spatial; ++d)
            for (std::size_t t = 0; t < 3; ++t) {
              std::array<std::int64_t, 3> p = g;  // the tap's global position
              p[static_cast<std::size_t>(d)] += kOffsets[t];
              const auto dd = static_cast<std::size_t>(d);
              if (clipped && (p[dd] < 0 || p[dd] >= length[dd])) continue;
              const std::int64_t w_index = (p[0] - origin[0]) * win_stride[0] +
                                           (p[1] - origin[1]) * win_stride[1] +
                                           (p[2] - origin[2]) * win_stride[2];
              f(out_index, w_index, kWeights[t]);
            }
        }
  }
};

// `window` and `y` may be views (a piece of the window, a band of the
// output): both are read and written through their strides.
template <typename T>
void stencil_forward(const Tensor& window, const Tensor& y, const Geometry& g) {
  const T* w = window.data<T>();
  T* out = y.data<T>();
  std::array<std::int64_t, 3> ys{0, 0, 0};  // the output's spatial strides, padded to 3
  for (std::int64_t d = 0; d < g.spatial; ++d)
    ys[static_cast<std::size_t>(d)] = y.stride(d + 2);
  std::vector<double> acc(static_cast<std::size_t>(g.outputs_per_plane()));
  for (std::int64_t n = 0; n < y.size(0); ++n)
    for (std::int64_t c = 0; c < y.size(1); ++c) {
      std::fill(acc.begin(), acc.end(), 0.0);
      const T* src = w + n * window.stride(0) + c * window.stride(1);
      g.for_each_tap([&](std::int64_t o, std::int64_t i, double weight) {
        acc[static_cast<std::size_t>(o)] += weight * static_cast<double>(src[i]);
      });
      T* dst = out + n * y.stride(0) + c * y.stride(1);
      std::size_t o = 0;
      for (std::int64_t o0 = 0; o0 < g.out_len[0]; ++o0)
        for (std::int64_t o1 = 0; o1 < g.out_len[1]; ++o1)
          for (std::int64_t o2 = 0; o2 < g.out_len[2]; ++o2)
            dst[o0 * ys[0] + o1 * ys[1] + o2 * ys[2]] = static_cast<T>(acc[o++]);
    }
}

// Adds the gradient of a box of outputs into `dst`, the window positions
// the box reads; `grad_y` (the box's band of the output's gradient) and
// `dst` (a piece of a gradient tile) are views, read and written through
// their strides. Sums per plane in f64, over the positions laid out densely.
template <typename T>
void stencil_backward(const Tensor& grad_y, const Tensor& dst, Geometry g) {
  std::array<std::int64_t, 3> ys{0, 0, 0}, ds{0, 0, 0};  // spatial strides, padded to 3
  for (std::int64_t d = 0; d < g.spatial; ++d) {
    ys[static_cast<std::size_t>(d)] = grad_y.stride(d + 2);
    ds[static_cast<std::size_t>(d)] = dst.stride(d + 2);
  }
  g.win_stride = {g.win_len[1] * g.win_len[2], g.win_len[2], 1};
  // Where each output (in for_each_tap's dense order) lies in grad_y.
  std::vector<std::int64_t> at;
  for (std::int64_t o0 = 0; o0 < g.out_len[0]; ++o0)
    for (std::int64_t o1 = 0; o1 < g.out_len[1]; ++o1)
      for (std::int64_t o2 = 0; o2 < g.out_len[2]; ++o2)
        at.push_back(o0 * ys[0] + o1 * ys[1] + o2 * ys[2]);
  std::vector<double> acc(static_cast<std::size_t>(g.window_per_plane()));
  for (std::int64_t n = 0; n < dst.size(0); ++n)
    for (std::int64_t c = 0; c < dst.size(1); ++c) {
      std::fill(acc.begin(), acc.end(), 0.0);
      const T* src = grad_y.data<T>() + n * grad_y.stride(0) + c * grad_y.stride(1);
      g.for_each_tap([&](std::int64_t o, std::int64_t i, double weight) {
        acc[static_cast<std::size_t>(i)] +=
            weight * static_cast<double>(src[at[static_cast<std::size_t>(o)]]);
      });
      T* out = dst.data<T>() + n * dst.stride(0) + c * dst.stride(1);
      std::size_t i = 0;
      for (std::int64_t i0 = 0; i0 < g.win_len[0]; ++i0)
        for (std::int64_t i1 = 0; i1 < g.win_len[1]; ++i1)
          for (std::int64_t i2 = 0; i2 < g.win_len[2]; ++i2) {
            T& v = out[i0 * ds[0] + i1 * ds[1] + i2 * ds[2]];
            v = static_cast<T>(static_cast<double>(v) + acc[i++]);
          }
    }
}

void check_local(const Tensor& local, const DTensorSpec& spec) {
  check_arg(local.shape() == spec.local_shape(), kComponent,
            "{}: internal: local result {} but the spec {} needs {}", kForward,
            shape_str(local.shape()), spec.str(), shape_str(spec.local_shape()));
}

std::vector<DTensor> forward(OpCall& call) {
  const LaplacianCall c = LaplacianCall::decode(call.schema(), false);
  auto inputs = call.redistributed_inputs();
  const DTensor& x = inputs[0];
  // The engine exchanges over call.group(m): the call's own tags, and the
  // agreement check (deferred by dispatch) confirmed before the first wait.
  WindowExchange engine(call, x.spec(), c.dims());
  // The window as tiles (the shard and the rows received), not one copy.
  WindowExchange::Pending pending = engine.post(x.to_local());
  const TiledTensor& window = pending.wait();
  const Geometry g(engine, x.shape(), c.boundary);
  const DTensorSpec& out = call.sharding().output_specs[0];
  Tensor y = Tensor::zeros(out.local_shape(), x.dtype());
  check_local(y, out);
  check_arg(engine.local_output_shape(y.size(0), y.size(1)) == y.shape(), kComponent,
            "{}: internal: the engine's output {} differs from the spec's {}", kForward,
            shape_str(engine.local_output_shape(y.size(0), y.size(1))), shape_str(y.shape()));
  // Each box of bands: the piece of the window its outputs read (a view of
  // a tile where they read inside one) and the band of y they write.
  for_each_window_band(window, g.reads(),
                       [&](const Tensor& piece, const std::vector<WindowBand>& box) {
                         const Tensor band = band_outputs(y, box);
                         if (x.dtype() == DType::F64)
                           stencil_forward<double>(piece, band, g.band(box, piece));
                         else
                           stencil_forward<float>(piece, band, g.band(box, piece));
                       });
  return {DTensor(y, out)};
}

std::vector<DTensor> backward(OpCall& call) {
  const LaplacianCall c = LaplacianCall::decode(call.schema(), true);
  auto inputs = call.redistributed_inputs();
  const DTensor& gy = inputs[0];
  const DTensor& x = inputs[1];
  WindowExchange engine(call, x.spec(), c.dims());
  const Geometry g(engine, x.shape(), c.boundary);
  // Only where the window lies matters, not its values: nothing is
  // received. Its gradient is written box by box straight into the tiles of
  // WindowExchange::gradient (this rank's gradient and the strips going
  // back to the ranks that own them), then sent and added where it belongs.
  const Tensor grad_y = gy.to_local();
  WindowExchange::Gradient grad = engine.gradient();
  add_window_gradient(grad.window(), g.reads(),
                      [&](const Tensor& dst, const std::vector<WindowBand>& box) {
                        const Tensor band = band_outputs(grad_y, box);
                        if (x.dtype() == DType::F64)
                          stencil_backward<double>(band, dst, g.band(box, dst));
                        else
                          stencil_backward<float>(band, dst, g.band(box, dst));
                      });
  const Tensor grad_x = grad.finish();
  const DTensorSpec& out = call.sharding().output_specs[0];
  check_local(grad_x, out);
  return {DTensor(grad_x, out)};
}

void register_laplacian() {
  OpDef fwd;
  fwd.name = kForward;
  fwd.validate = [](const OpSchema& s) { check_call(LaplacianCall::decode(s, false)); };
  fwd.output_meta = [](const OpSchema& s) {
    const DTensor& x = s.dtensor(0);
    return std::vector<TensorMeta>{{x.shape(), x.dtype()}};
  };
  fwd.strategies = [](const OpSchema& s) {
    const DTensor& x = s.dtensor(0);
    return strategies(x.mesh().ndim(), x.spec().ndim(), 1);
  };
  register_op(fwd);
  // The handler communicates only through WindowExchange, that is through
  // OpCall::group(): dispatch's agreement check can travel with its first
  // messages instead of costing a round trip of its own.
  register_op_handler(kForward, forward, false, {.defers_agreement = true});

  OpDef bwd;
  bwd.name = kBackward;
  bwd.validate = [](const OpSchema& s) { check_call(LaplacianCall::decode(s, true)); };
  bwd.output_meta = [](const OpSchema& s) {
    const DTensor& x = s.dtensor(1);
    return std::vector<TensorMeta>{{x.shape(), x.dtype()}};
  };
  bwd.strategies = [](const OpSchema& s) {
    const DTensor& x = s.dtensor(1);
    return strategies(x.mesh().ndim(), x.spec().ndim(), 2);
  };
  register_op(bwd);
  register_op_handler(kBackward, backward, false, {.defers_agreement = true});
}

}  // namespace

DTENSOR_PLUGIN(register_laplacian)
