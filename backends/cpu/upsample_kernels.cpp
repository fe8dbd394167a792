// CPU kernels of upsample (dtensor/ops/kernels/upsample.h): f32 and f64 in
// their own type, bf16 and f16 widened to f32 and rounded once.
//
// The forward runs row by row along the last spatial dim: the outer dims'
// taps of a row combine into at most four (offset, weight) bases, and the
// inner loop gathers the last dim's one or two taps per output, vectorised
// (AVX-512/AVX2 gathers). The backward is the transposed scatter, a scalar
// loop since neighbouring outputs add into the same inputs. Planes (N * C)
// run in parallel on the rank's threads; each writes only its own plane.
#include <omp.h>

#include <algorithm>
#include <vector>

#include "backends/cpu/compute_type.h"
#include "backends/cpu/simd.h"
#include "dtensor/core/errors.h"
#include "dtensor/ops/kernels/upsample.h"

namespace dtensor::cpu {
namespace {

using kernels::ResampleTaps;

// Planes times outputs below this run on one thread.
constexpr std::int64_t kParallelOutputs = std::int64_t{1} << 14;

// y[c] += w * w0[c] x[i0[c]] (nearest) and y[c] += w * (w0[c] x[i0[c]] + w1[c] x[i1[c]])
// (linear) over one row of outputs; x is the plane shifted by the row's base.
// One body per loop, inlined into plain functions per type that carry the
// AVX2 / AVX-512 clones (as norm_rows.cpp does).
template <typename C>
[[gnu::always_inline]] inline void nearest_body(const C* x, C w, const std::int64_t* i0,
                                                const C* w0, C* y, std::int64_t n) {
#pragma omp simd
  for (std::int64_t c = 0; c < n; ++c)
    y[c] += w * (w0[c] * x[i0[c]]);
}
template <typename C>
[[gnu::always_inline]] inline void linear_body(const C* x, C w, const std::int64_t* i0,
                                               const std::int64_t* i1, const C* w0, const C* w1,
                                               C* y, std::int64_t n) {
#pragma omp simd
  for (std::int64_t c = 0; c < n; ++c)
    y[c] += w * (w0[c] * x[i0[c]] + w1[c] * x[i1[c]]);
}
DTENSOR_SIMD_CLONES void nearest_row(const float* x, float w, const std::int64_t* i0,
                                     const float* w0, float* y, std::int64_t n) {
  nearest_body(x, w, i0, w0, y, n);
}
DTENSOR_SIMD_CLONES void nearest_row(const double* x, double w, const std::int64_t* i0,
                                     const double* w0, double* y, std::int64_t n) {
  nearest_body(x, w, i0, w0, y, n);
}
DTENSOR_SIMD_CLONES void linear_row(const float* x, float w, const std::int64_t* i0,
                                    const std::int64_t* i1, const float* w0, const float* w1,
                                    float* y, std::int64_t n) {
  linear_body(x, w, i0, i1, w0, w1, y, n);
}
DTENSOR_SIMD_CLONES void linear_row(const double* x, double w, const std::int64_t* i0,
                                    const std::int64_t* i1, const double* w0, const double* w1,
                                    double* y, std::int64_t n) {
  linear_body(x, w, i0, i1, w0, w1, y, n);
}

// One (offset in the plane, weight) of a row's outer taps.
struct Base {
  std::int64_t offset;
  double weight;
};

// Three spatial dims always, right-aligned so that the last one is dim 2 (the
// inner loop); missing leading dims are one position with one tap.
template <typename T>
struct Geometry {
  std::int64_t planes = 0, win_plane = 1, out_plane = 1;
  std::int64_t out[3] = {1, 1, 1}, stride[3] = {1, 1, 1};
  ResampleTaps taps[3];
  std::vector<T> w0, w1;  // the last dim's weights in the compute type

  Geometry(const Shape& window_shape, const std::vector<ResampleTaps>& d) {
    DTENSOR_CHECK_ARG(!d.empty() && d.size() <= 3 && window_shape.size() == d.size() + 2,
                      "upsample", "internal: interpolation over {} dims of a window {}", d.size(),
                      shape_str(window_shape));
    planes = window_shape[0] * window_shape[1];
    std::int64_t win[3] = {1, 1, 1};
    const std::size_t first = 3 - d.size();
    for (std::size_t i = 0; i < 3; ++i) {
      if (i < first) {
        taps[i] = {{0}, {0}, {1.0}, {0.0}, 1};
        continue;
      }
      const ResampleTaps& t = d[i - first];
      const auto outputs = t.i0.size();
      check_arg(t.w0.size() == outputs && (t.taps == 1 || (t.taps == 2 && t.i1.size() == outputs &&
                                                           t.w1.size() == outputs)),
                "upsample", "internal: inconsistent taps for spatial dim {}", i - first);
      taps[i] = t;
      win[i] = window_shape[i - first + 2];
      out[i] = static_cast<std::int64_t>(outputs);
    }
    stride[0] = win[1] * win[2];
    stride[1] = win[2];
    win_plane = win[0] * win[1] * win[2];
    out_plane = out[0] * out[1] * out[2];
    for (std::size_t dim = 0; dim < 3; ++dim)
      for (std::int64_t o = 0; o < out[dim]; ++o) {
        const auto k = static_cast<std::size_t>(o);
        check_arg(taps[dim].i0[k] >= 0 && taps[dim].i0[k] < win[dim] &&
                      (taps[dim].taps == 1 || (taps[dim].i1[k] >= 0 && taps[dim].i1[k] < win[dim])),
                  "upsample", "internal: output {} reads outside the window", o);
      }
    w0.assign(taps[2].w0.begin(), taps[2].w0.end());
    if (taps[2].taps == 2) w1.assign(taps[2].w1.begin(), taps[2].w1.end());
  }

  // fn(plane, index of the row's first output in the plane, bases) for each
  // row of outputs along the last dim, planes in parallel when it pays.
  template <typename Fn>
  void for_each_row(Fn&& fn) const {
    const bool parallel = planes > 1 && planes * out_plane >= kParallelOutputs;
#pragma omp parallel if (parallel)
    {
      std::vector<Base> bases;
#pragma omp for schedule(static)
      for (std::int64_t p = 0; p < planes; ++p) {
        std::int64_t at = 0;
        for (std::int64_t a = 0; a < out[0]; ++a)
          for (std::int64_t b = 0; b < out[1]; ++b) {
            row_bases(a, b, bases);
            fn(p, at, bases);
            at += out[2];
          }
      }
    }
  }

 private:
  void row_bases(std::int64_t a, std::int64_t b, std::vector<Base>& bases) const {
    bases.clear();
    const auto ia = static_cast<std::size_t>(a), ib = static_cast<std::size_t>(b);
    for (int ta = 0; ta < taps[0].taps; ++ta)
      for (int tb = 0; tb < taps[1].taps; ++tb)
        bases.push_back(
            {(ta ? taps[0].i1[ia] : taps[0].i0[ia]) * stride[0] +
                 (tb ? taps[1].i1[ib] : taps[1].i0[ib]) * stride[1],
             (ta ? taps[0].w1[ia] : taps[0].w0[ia]) * (tb ? taps[1].w1[ib] : taps[1].w0[ib])});
  }
};

template <typename T>
void forward(const Tensor& window, Tensor& output, const Geometry<T>& g) {
  const T* x = window.data<T>();
  T* y = output.data<T>();
  std::fill(y, y + output.numel(), T(0));
  const ResampleTaps& last = g.taps[2];
  g.for_each_row([&](std::int64_t p, std::int64_t row, const std::vector<Base>& bases) {
    T* out = y + p * g.out_plane + row;
    for (const Base& base : bases) {
      const T* in = x + p * g.win_plane + base.offset;
      const auto w = static_cast<T>(base.weight);
      if (last.taps == 1)
        nearest_row(in, w, last.i0.data(), g.w0.data(), out, g.out[2]);
      else
        linear_row(in, w, last.i0.data(), last.i1.data(), g.w0.data(), g.w1.data(), out, g.out[2]);
    }
  });
}

template <typename T>
void backward(const Tensor& grad_output, Tensor& grad_window, const Geometry<T>& g) {
  const T* gy = grad_output.data<T>();
  T* gx = grad_window.data<T>();
  std::fill(gx, gx + grad_window.numel(), T(0));
  const ResampleTaps& last = g.taps[2];
  const std::int64_t* i0 = last.i0.data();
  const std::int64_t* i1 = last.i1.data();
  g.for_each_row([&](std::int64_t p, std::int64_t row, const std::vector<Base>& bases) {
    const T* in = gy + p * g.out_plane + row;
    for (const Base& base : bases) {
      T* plane = gx + p * g.win_plane + base.offset;
      const auto w = static_cast<T>(base.weight);
      for (std::int64_t c = 0; c < g.out[2]; ++c) {
        const auto k = static_cast<std::size_t>(c);
        plane[i0[c]] += w * g.w0[k] * in[c];
        if (last.taps == 2) plane[i1[c]] += w * g.w1[k] * in[c];
      }
    }
  });
}

void run_forward(const kernels::UpsampleForwardArgs& a) {
  DTENSOR_CHECK_ARG(a.output.shape() == kernels::resample_output_shape(a.window.shape(), a.dims),
                    "upsample", "internal: output {} for outputs {}", shape_str(a.output.shape()),
                    shape_str(kernels::resample_output_shape(a.window.shape(), a.dims)));
  const Tensor x = in_compute(a.window);
  compute_into(a.output, [&](auto t, Tensor& y) {
    using T = decltype(t);
    forward<T>(x, y, Geometry<T>(a.window.shape(), a.dims));
  });
}

void run_backward(const kernels::UpsampleBackwardArgs& a) {
  DTENSOR_CHECK_ARG(
      a.grad_output.shape() == kernels::resample_output_shape(a.grad_window.shape(), a.dims),
      "upsample", "internal: local grad_output {} but the outputs are {}",
      shape_str(a.grad_output.shape()),
      shape_str(kernels::resample_output_shape(a.grad_window.shape(), a.dims)));
  const Tensor gy = in_compute(a.grad_output);
  compute_into(a.grad_window, [&](auto t, Tensor& gx) {
    using T = decltype(t);
    backward<T>(gy, gx, Geometry<T>(a.grad_window.shape(), a.dims));
  });
}

struct Registrar {
  Registrar() {
    for (DType dt : {DType::F32, DType::F64, DType::BF16, DType::F16}) {
      register_kernel(kernels::kUpsampleForward, DeviceType::CPU, dt,
                      KernelFunction<kernels::UpsampleForwardArgs>(run_forward));
      register_kernel(kernels::kUpsampleBackward, DeviceType::CPU, dt,
                      KernelFunction<kernels::UpsampleBackwardArgs>(run_backward));
    }
  }
};
const Registrar registrar;

}  // namespace
}  // namespace dtensor::cpu
