#include "ops/window/pool_kernels.h"

#include <cmath>
#include <limits>

#include "dtensor/core/errors.h"

namespace dtensor::window {
namespace {

// Three spatial dims always: missing ones are one position wide.
struct Geometry3 {
  std::int64_t planes = 0;  // N * C
  std::int64_t win[3] = {1, 1, 1}, out[3] = {1, 1, 1};
  std::int64_t win_plane = 1, out_plane = 1;
  std::vector<std::vector<std::int64_t>> offs[3];  // per dim, per output: flat window offsets
  const PoolTaps* dims[3] = {nullptr, nullptr, nullptr};

  Geometry3(const Shape& window_shape, const std::vector<PoolTaps>& d) {
    check_arg(d.size() >= 1 && d.size() <= 3 && window_shape.size() == d.size() + 2, "window",
              "internal: pool over {} dims of a window {}", d.size(), shape_str(window_shape));
    planes = window_shape[0] * window_shape[1];
    for (std::size_t i = 0; i < d.size(); ++i) {
      win[i] = window_shape[i + 2];
      out[i] = static_cast<std::int64_t>(d[i].taps.size());
      dims[i] = &d[i];
    }
    const std::int64_t stride[3] = {win[1] * win[2], win[2], 1};
    for (int i = 0; i < 3; ++i) {
      if (!dims[i]) {
        offs[i] = {{0}};
        continue;
      }
      for (const auto& t : dims[i]->taps) {
        offs[i].emplace_back();
        for (auto w : t)
          offs[i].back().push_back(w * stride[i]);
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

  // fn(plane, output flat index in plane, o0, o1, o2) for every output.
  template <typename Fn>
  void for_each_output(Fn&& fn) const {
    for (std::int64_t p = 0; p < planes; ++p) {
      std::int64_t at = 0;
      for (std::int64_t a = 0; a < out[0]; ++a)
        for (std::int64_t b = 0; b < out[1]; ++b)
          for (std::int64_t c = 0; c < out[2]; ++c)
            fn(p, at++, a, b, c);
    }
  }
  // fn(window offset in plane) over one output's taps, in kernel order.
  template <typename Fn>
  void for_each_tap(std::int64_t a, std::int64_t b, std::int64_t c, Fn&& fn) const {
    for (auto x : offs[0][a])
      for (auto y : offs[1][b])
        for (auto z : offs[2][c])
          fn(x + y + z);
  }
  std::int64_t tap_count(std::int64_t a, std::int64_t b, std::int64_t c) const {
    return static_cast<std::int64_t>(offs[0][a].size() * offs[1][b].size() * offs[2][c].size());
  }
  std::int64_t padded_size(std::int64_t a, std::int64_t b, std::int64_t c) const {
    std::int64_t n = 1;
    const std::int64_t idx[3] = {a, b, c};
    for (int i = 0; i < 3; ++i)
      if (dims[i]) n *= dims[i]->padded_size[static_cast<std::size_t>(idx[i])];
    return n;
  }
};

// Computes in f32 for the 16-bit types (they convert only through float).
DType compute_dtype(DType d) {
  return d == DType::F64 ? DType::F64 : DType::F32;
}

template <typename T>
void max_forward(const T* x, T* y, std::int64_t* pick, const Geometry3& g) {
  g.for_each_output(
      [&](std::int64_t p, std::int64_t o, std::int64_t a, std::int64_t b, std::int64_t c) {
        const T* plane = x + p * g.win_plane;
        T best = -std::numeric_limits<T>::infinity();
        std::int64_t at = -1;
        // PyTorch's rule: a strictly greater value or any NaN takes the place,
        // so equal maxima keep the first and the last NaN wins.
        g.for_each_tap(a, b, c, [&](std::int64_t off) {
          const T v = plane[off];
          if (at < 0) at = off;
          if (v > best || std::isnan(v)) {
            best = v;
            at = off;
          }
        });
        y[p * g.out_plane + o] = best;
        if (pick) pick[p * g.out_plane + o] = at;
      });
}

template <typename T>
double divisor(const Geometry3& g, const AvgDivisor& r, std::int64_t a, std::int64_t b,
               std::int64_t c) {
  if (r.divisor_override) return static_cast<double>(*r.divisor_override);
  return static_cast<double>(r.count_include_pad ? g.padded_size(a, b, c) : g.tap_count(a, b, c));
}

}  // namespace

PoolTaps pool_taps(const WindowDim& dim, std::int64_t length, const WindowSpan& span) {
  PoolTaps t;
  const std::int64_t o_len = dim.output_length_for(length);
  for (std::int64_t o = span.output.offset; o < span.output.end(); ++o) {
    std::vector<std::int64_t> taps;
    if (dim.kind == WindowDim::Kind::Adaptive) {
      const std::int64_t lo = (o * length) / o_len;
      const std::int64_t hi = ((o + 1) * length + o_len - 1) / o_len;
      for (std::int64_t v = lo; v < hi; ++v)
        taps.push_back(v - span.origin);
      t.padded_size.push_back(hi - lo);
    } else {
      const std::int64_t start = o * dim.stride - dim.pad_left;
      for (std::int64_t j = 0; j < dim.kernel; ++j) {
        const std::int64_t v = start + j * dim.dilation;
        if (v >= 0 && v < length) taps.push_back(v - span.origin);
      }
      const std::int64_t end = std::min(start + dim.kernel, length + dim.pad_right);
      t.padded_size.push_back(end - start);
    }
    for (auto w : taps)
      check_arg(w >= 0 && w < span.length, "window",
                "internal: output {} reads window position {} outside [0, {})", o, w, span.length);
    t.taps.push_back(std::move(taps));
  }
  return t;
}

Tensor max_pool_forward(const Tensor& window, const std::vector<PoolTaps>& dims) {
  const Geometry3 g(window.shape(), dims);
  const Tensor x = window.to(compute_dtype(window.dtype())).contiguous();
  Tensor y = Tensor::empty(g.out_shape(window.shape()), x.dtype());
  if (x.dtype() == DType::F64)
    max_forward<double>(x.data<double>(), y.data<double>(), nullptr, g);
  else
    max_forward<float>(x.data<float>(), y.data<float>(), nullptr, g);
  return y.dtype() == window.dtype() ? y : y.to(window.dtype());
}

Tensor max_pool_backward(const Tensor& window, const Tensor& grad_output,
                         const std::vector<PoolTaps>& dims) {
  const Geometry3 g(window.shape(), dims);
  const DType cd = compute_dtype(window.dtype());
  const Tensor x = window.to(cd).contiguous();
  const Tensor gy = grad_output.to(DType::F64).contiguous();
  Tensor y = Tensor::empty(g.out_shape(window.shape()), cd);
  std::vector<std::int64_t> pick(static_cast<std::size_t>(g.planes * g.out_plane));
  if (cd == DType::F64)
    max_forward<double>(x.data<double>(), y.data<double>(), pick.data(), g);
  else
    max_forward<float>(x.data<float>(), y.data<float>(), pick.data(), g);
  Tensor gx = Tensor::zeros(window.shape(), DType::F64);
  double* out = gx.data<double>();
  const double* in = gy.data<double>();
  for (std::int64_t p = 0; p < g.planes; ++p)
    for (std::int64_t o = 0; o < g.out_plane; ++o) {
      const std::int64_t at = pick[static_cast<std::size_t>(p * g.out_plane + o)];
      if (at >= 0) out[p * g.win_plane + at] += in[p * g.out_plane + o];
    }
  return gx.to(window.dtype());
}

Tensor avg_pool_forward(const Tensor& window, const std::vector<PoolTaps>& dims,
                        const AvgDivisor& rule) {
  const Geometry3 g(window.shape(), dims);
  const Tensor x = window.to(DType::F64).contiguous();
  Tensor y = Tensor::empty(g.out_shape(window.shape()), DType::F64);
  const double* in = x.data<double>();
  double* out = y.data<double>();
  g.for_each_output(
      [&](std::int64_t p, std::int64_t o, std::int64_t a, std::int64_t b, std::int64_t c) {
        const double* plane = in + p * g.win_plane;
        double sum = 0;
        g.for_each_tap(a, b, c, [&](std::int64_t off) { sum += plane[off]; });
        out[p * g.out_plane + o] = sum / divisor<double>(g, rule, a, b, c);
      });
  return y.to(window.dtype());
}

Tensor avg_pool_backward(const Tensor& grad_output, const Shape& window_shape,
                         const std::vector<PoolTaps>& dims, const AvgDivisor& rule) {
  const Geometry3 g(window_shape, dims);
  const Tensor gy = grad_output.to(DType::F64).contiguous();
  Tensor gx = Tensor::zeros(window_shape, DType::F64);
  const double* in = gy.data<double>();
  double* out = gx.data<double>();
  g.for_each_output(
      [&](std::int64_t p, std::int64_t o, std::int64_t a, std::int64_t b, std::int64_t c) {
        double* plane = out + p * g.win_plane;
        const double share = in[p * g.out_plane + o] / divisor<double>(g, rule, a, b, c);
        g.for_each_tap(a, b, c, [&](std::int64_t off) { plane[off] += share; });
      });
  return gx.to(grad_output.dtype());
}

}  // namespace dtensor::window
