#include "ops/window/upsample_kernels.h"

#include "dtensor/core/errors.h"

namespace dtensor::window {
namespace {

// Three spatial dims always: missing ones are one position wide, one tap.
struct Geometry3 {
  std::int64_t planes = 0;  // N * C (local)
  std::int64_t win[3] = {1, 1, 1}, out[3] = {1, 1, 1};
  std::int64_t win_plane = 1, out_plane = 1;
  ResampleTaps taps[3];

  Geometry3(const Shape& window_shape, const std::vector<ResampleTaps>& d) {
    check_arg(d.size() >= 1 && d.size() <= 3 && window_shape.size() == d.size() + 2, "upsample",
              "internal: interpolation over {} dims of a window {}", d.size(),
              shape_str(window_shape));
    planes = window_shape[0] * window_shape[1];
    for (int i = 0; i < 3; ++i) {
      if (static_cast<std::size_t>(i) < d.size()) {
        taps[i] = d[static_cast<std::size_t>(i)];
        win[i] = window_shape[static_cast<std::size_t>(i) + 2];
        out[i] = static_cast<std::int64_t>(taps[i].i0.size());
      } else {
        taps[i] = {{0}, {0}, {1.0}, {0.0}, 1};
      }
    }
    win_plane = win[0] * win[1] * win[2];
    out_plane = out[0] * out[1] * out[2];
  }

  Shape out_shape(const Shape& window_shape) const {
    Shape s{window_shape[0], window_shape[1]};
    for (std::size_t i = 2; i < window_shape.size(); ++i)
      s.push_back(out[i - 2]);
    return s;
  }

  // fn(output flat index in plane, window offset in plane, weight) for every
  // (output, tap) pair.
  template <typename Fn>
  void for_each_tap(Fn&& fn) const {
    const std::int64_t stride[3] = {win[1] * win[2], win[2], 1};
    std::int64_t at = 0;
    for (std::int64_t a = 0; a < out[0]; ++a)
      for (std::int64_t b = 0; b < out[1]; ++b)
        for (std::int64_t c = 0; c < out[2]; ++c, ++at)
          for (int ta = 0; ta < taps[0].taps; ++ta)
            for (int tb = 0; tb < taps[1].taps; ++tb)
              for (int tc = 0; tc < taps[2].taps; ++tc) {
                const auto ia = static_cast<std::size_t>(a), ib = static_cast<std::size_t>(b),
                           ic = static_cast<std::size_t>(c);
                const std::int64_t off = (ta ? taps[0].i1[ia] : taps[0].i0[ia]) * stride[0] +
                                         (tb ? taps[1].i1[ib] : taps[1].i0[ib]) * stride[1] +
                                         (tc ? taps[2].i1[ic] : taps[2].i0[ic]) * stride[2];
                const double w = (ta ? taps[0].w1[ia] : taps[0].w0[ia]) *
                                 (tb ? taps[1].w1[ib] : taps[1].w0[ib]) *
                                 (tc ? taps[2].w1[ic] : taps[2].w0[ic]);
                fn(at, off, w);
              }
  }
};

}  // namespace

ResampleTaps resample_taps(const WindowDim& dim, std::int64_t length, const WindowSpan& span,
                           bool backward) {
  ResampleTaps t;
  t.taps = dim.kernel == 1 ? 1 : 2;
  for (std::int64_t o = span.output.offset; o < span.output.end(); ++o) {
    const auto s = dim.resample_source(length, o, backward);
    const std::int64_t i0 = s.i0 - span.origin, i1 = s.i1 - span.origin;
    check_arg(i0 >= 0 && i1 < span.length, "upsample",
              "internal: output {} reads window positions [{}, {}] outside [0, {})", o, i0, i1,
              span.length);
    t.i0.push_back(i0);
    t.i1.push_back(i1);
    t.w0.push_back(s.w0);
    t.w1.push_back(s.w1);
  }
  return t;
}

Tensor upsample_forward(const Tensor& window, const std::vector<ResampleTaps>& dims) {
  const Geometry3 g(window.shape(), dims);
  const Tensor x = window.to(DType::F64).contiguous();
  Tensor y = Tensor::zeros(g.out_shape(window.shape()), DType::F64);
  const double* in = x.data<double>();
  double* out = y.data<double>();
  for (std::int64_t p = 0; p < g.planes; ++p) {
    const double* src = in + p * g.win_plane;
    double* dst = out + p * g.out_plane;
    g.for_each_tap([&](std::int64_t o, std::int64_t off, double w) { dst[o] += w * src[off]; });
  }
  return y.to(window.dtype());
}

Tensor upsample_backward(const Tensor& grad_output, const Shape& window_shape,
                         const std::vector<ResampleTaps>& dims) {
  const Geometry3 g(window_shape, dims);
  check_arg(grad_output.shape() == g.out_shape(window_shape), "upsample",
            "internal: local grad_output {} but the outputs are {}", shape_str(grad_output.shape()),
            shape_str(g.out_shape(window_shape)));
  const Tensor gy = grad_output.to(DType::F64).contiguous();
  Tensor gx = Tensor::zeros(window_shape, DType::F64);
  const double* in = gy.data<double>();
  double* out = gx.data<double>();
  for (std::int64_t p = 0; p < g.planes; ++p) {
    const double* src = in + p * g.out_plane;
    double* dst = out + p * g.win_plane;
    g.for_each_tap([&](std::int64_t o, std::int64_t off, double w) { dst[off] += w * src[o]; });
  }
  return gx.to(grad_output.dtype());
}

}  // namespace dtensor::window
