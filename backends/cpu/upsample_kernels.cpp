// CPU kernels of upsample (dtensor/ops/kernels/upsample.h): f32 and f64 in
// their own type, bf16 and f16 widened to f32 and rounded once.
//
// Forward: row by row along the last spatial dim. The outer dims' taps of a
// row combine into at most four (offset, weight) bases: their input rows are
// mixed first, whole and contiguous, into one row of the window's width;
// then one pass gathers the last dim's one or two taps per output from it
// and writes the result (no zero-fill of the output first), with 32-bit
// indices so that AVX-512 gathers 16 lanes at once. A row whose bases equal
// the previous row's (nearest upsampling repeats every row) is a copy of it.
//
// Backward: the same rows, transposed. A scatter (grad[i0[c]] += g[c]) adds
// into the same element from neighbouring outputs, a chain of dependent
// stores; instead each window position gathers the outputs that read it:
// the last dim's taps inverted once per call into at most K (output, weight)
// pairs per position, padded with weight 0, stored tap-major so that the
// loop over positions is the vector one.
//
// Planes (N * C) run in parallel on the rank's threads; each writes only its
// own plane.
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "backends/cpu/compute_type.h"
#include "backends/cpu/parallel_region.h"
#include "backends/cpu/simd.h"
#include "dtensor/core/errors.h"
#include "dtensor/ops/kernels/upsample.h"

namespace dtensor::cpu {
namespace {

using kernels::ResampleTaps;

// Planes times outputs below this run on one thread.
constexpr std::int64_t kParallelOutputs = std::int64_t{1} << 14;
// A row's outer taps: two per dim of the two outer dims.
constexpr int kMaxBases = 4;

// One (offset in the plane, weight) of a row's outer taps.
struct Base {
  std::int64_t offset = 0;
  double weight = 0;
  bool operator==(const Base&) const = default;
};
struct RowBases {
  Base at[kMaxBases];
  int n = 0;
  bool operator==(const RowBases& o) const { return n == o.n && std::equal(at, at + n, o.at); }
};

// y[c] = x[i0[c]]: nearest, every weight 1.
template <typename C>
[[gnu::always_inline]] inline void copy_body(const C* x, const std::int32_t* i0, C* y,
                                             std::int64_t n) {
#pragma omp simd
  for (std::int64_t c = 0; c < n; ++c)
    y[c] = x[i0[c]];
}
// y[c] = w0[c] x[i0[c]] + w1[c] x[i1[c]].
template <typename C>
[[gnu::always_inline]] inline void lerp_body(const C* x, const std::int32_t* i0,
                                             const std::int32_t* i1, const C* w0, const C* w1, C* y,
                                             std::int64_t n) {
#pragma omp simd
  for (std::int64_t c = 0; c < n; ++c)
    y[c] = w0[c] * x[i0[c]] + w1[c] * x[i1[c]];
}
// y[i] = sum over the bases b of wb[b] x_b[i]: the outer dims' interpolation
// of whole rows, contiguous, before the last dim's.
template <typename C>
[[gnu::always_inline]] inline void mix_body(const C* const* x, const C* wb, int nb, C* y,
                                            std::int64_t n) {
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i)
    y[i] = wb[0] * x[0][i];
  for (int b = 1; b < nb; ++b) {
    const C* xb = x[b];
    const C w = wb[b];
#pragma omp simd
    for (std::int64_t i = 0; i < n; ++i)
      y[i] += w * xb[i];
  }
}
// g[i] += w * sum over k < K of wt[k][i] * gy[at[k][i]] (tap-major, stride n).
template <typename C>
[[gnu::always_inline]] inline void gather_body(const C* gy, C w, const std::int32_t* at,
                                               const C* wt, int K, C* g, std::int64_t n) {
  for (int k = 0; k < K; ++k) {
    const std::int32_t* a = at + k * n;
    const C* v = wt + k * n;
#pragma omp simd
    for (std::int64_t i = 0; i < n; ++i)
      g[i] += w * v[i] * gy[a[i]];
  }
}
DTENSOR_SIMD_CLONES void copy_row(const float* x, const std::int32_t* i0, float* y,
                                  std::int64_t n) {
  copy_body(x, i0, y, n);
}
DTENSOR_SIMD_CLONES void copy_row(const double* x, const std::int32_t* i0, double* y,
                                  std::int64_t n) {
  copy_body(x, i0, y, n);
}
DTENSOR_SIMD_CLONES void lerp_row(const float* x, const std::int32_t* i0, const std::int32_t* i1,
                                  const float* w0, const float* w1, float* y, std::int64_t n) {
  lerp_body(x, i0, i1, w0, w1, y, n);
}
DTENSOR_SIMD_CLONES void lerp_row(const double* x, const std::int32_t* i0, const std::int32_t* i1,
                                  const double* w0, const double* w1, double* y, std::int64_t n) {
  lerp_body(x, i0, i1, w0, w1, y, n);
}
DTENSOR_SIMD_CLONES void mix_rows(const float* const* x, const float* wb, int nb, float* y,
                                  std::int64_t n) {
  mix_body(x, wb, nb, y, n);
}
DTENSOR_SIMD_CLONES void mix_rows(const double* const* x, const double* wb, int nb, double* y,
                                  std::int64_t n) {
  mix_body(x, wb, nb, y, n);
}
DTENSOR_SIMD_CLONES void gather_row(const float* gy, float w, const std::int32_t* at,
                                    const float* wt, int K, float* g, std::int64_t n) {
  gather_body(gy, w, at, wt, K, g, n);
}
DTENSOR_SIMD_CLONES void gather_row(const double* gy, double w, const std::int32_t* at,
                                    const double* wt, int K, double* g, std::int64_t n) {
  gather_body(gy, w, at, wt, K, g, n);
}

// Three spatial dims always, right-aligned so that the last one is dim 2 (the
// inner loop); missing leading dims are one position with one tap. Offsets
// come from the tensors' strides, so the forward's window and output may be
// views (a tile of a halo window, a band of the output) whose last dim is
// contiguous; each (n, c) plane starts at n * stride(0) + c * stride(1).
template <typename T>
struct Geometry {
  std::int64_t planes = 0, channels = 1, out_plane = 1;
  std::int64_t win[3] = {1, 1, 1}, out[3] = {1, 1, 1}, stride[3] = {0, 0, 0};
  std::int64_t out_stride[3] = {0, 0, 0};  // the output's, as `stride`
  std::int64_t win_nc[2] = {0, 0}, out_nc[2] = {0, 0};
  ResampleTaps taps[3];
  // The last dim's taps in the kernels' types. Nearest: i1 = i0, w1 = 0.
  std::vector<std::int32_t> i0, i1;
  std::vector<T> w0, w1;
  // Every weight is 1 and there is one tap per dim: rows are plain copies.
  bool nearest = true;

  Geometry(const Tensor& window, const Tensor& output, const std::vector<ResampleTaps>& d) {
    const Shape& window_shape = window.shape();
    DTENSOR_CHECK_ARG(!d.empty() && d.size() <= 3 && window_shape.size() == d.size() + 2,
                      "upsample", "internal: interpolation over {} dims of a window {}", d.size(),
                      shape_str(window_shape));
    planes = window_shape[0] * window_shape[1];
    channels = window_shape[1];
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
      stride[i] = window.strides()[i - first + 2];
      out_stride[i] = output.strides()[i - first + 2];
    }
    DTENSOR_CHECK_ARG(output.shape() == kernels::resample_output_shape(window_shape, d), "upsample",
                      "internal: output {} for outputs {}", shape_str(output.shape()),
                      shape_str(kernels::resample_output_shape(window_shape, d)));
    DTENSOR_CHECK_ARG((win[2] <= 1 || stride[2] == 1) && (out[2] <= 1 || out_stride[2] == 1),
                      "upsample", "internal: the last dim must be contiguous");
    win_nc[0] = window.strides()[0];
    win_nc[1] = window.strides()[1];
    out_nc[0] = output.strides()[0];
    out_nc[1] = output.strides()[1];
    check_arg(win[2] < (std::int64_t{1} << 31) && out[2] < (std::int64_t{1} << 31), "upsample",
              "internal: a row of {} inputs or {} outputs", win[2], out[2]);
    out_plane = out[0] * out[1] * out[2];
    for (std::size_t dim = 0; dim < 3; ++dim) {
      const ResampleTaps& t = taps[dim];
      nearest = nearest && t.taps == 1;
      for (std::int64_t o = 0; o < out[dim]; ++o) {
        const auto k = static_cast<std::size_t>(o);
        check_arg(t.i0[k] >= 0 && t.i0[k] < win[dim] &&
                      (t.taps == 1 || (t.i1[k] >= 0 && t.i1[k] < win[dim])),
                  "upsample", "internal: output {} reads outside the window", o);
        nearest = nearest && t.w0[k] == 1.0;
      }
    }
    const ResampleTaps& last = taps[2];
    i0.assign(last.i0.begin(), last.i0.end());
    w0.assign(last.w0.begin(), last.w0.end());
    if (last.taps == 2) {
      i1.assign(last.i1.begin(), last.i1.end());
      w1.assign(last.w1.begin(), last.w1.end());
    } else {
      i1 = i0;
      w1.assign(w0.size(), T(0));
    }
  }

  // Where plane p starts in the window and in the output.
  struct Plane {
    std::int64_t window = 0, output = 0;
  };
  Plane plane(std::int64_t p) const {
    const std::int64_t n = p / channels, c = p % channels;
    return {n * win_nc[0] + c * win_nc[1], n * out_nc[0] + c * out_nc[1]};
  }

  // fn(where the plane starts, offset of the row's first output in its output plane, bases,
  // offset of the previous row when its bases are the same, else -1) for
  // each row of outputs along the last dim, in order within a plane, planes
  // in parallel when it pays.
  template <typename Fn>
  void for_each_row(Fn&& fn) const {
    const bool parallel = planes > 1 && planes * out_plane >= kParallelOutputs;
    parallel_region(parallel, [&] {
#pragma omp for schedule(static)
      for (std::int64_t p = 0; p < planes; ++p) {
        const Plane starts = plane(p);
        std::int64_t previous_at = -1;
        RowBases previous;
        for (std::int64_t a = 0; a < out[0]; ++a)
          for (std::int64_t b = 0; b < out[1]; ++b) {
            const RowBases bases = row_bases(a, b);
            const std::int64_t at = a * out_stride[0] + b * out_stride[1];
            fn(starts, at, bases, previous_at >= 0 && bases == previous ? previous_at : -1);
            previous = bases;
            previous_at = at;
          }
      }
    });
  }

 private:
  RowBases row_bases(std::int64_t a, std::int64_t b) const {
    RowBases r;
    const auto ia = static_cast<std::size_t>(a), ib = static_cast<std::size_t>(b);
    for (int ta = 0; ta < taps[0].taps; ++ta)
      for (int tb = 0; tb < taps[1].taps; ++tb)
        r.at[r.n++] = {
            (ta ? taps[0].i1[ia] : taps[0].i0[ia]) * stride[0] +
                (tb ? taps[1].i1[ib] : taps[1].i0[ib]) * stride[1],
            (ta ? taps[0].w1[ia] : taps[0].w0[ia]) * (tb ? taps[1].w1[ib] : taps[1].w0[ib])};
    return r;
  }
};

// The last dim's taps inverted: window position i is read by outputs
// at[k * n + i] with weights wt[k * n + i], k < K (n the window's row).
template <typename T>
struct InvertedTaps {
  int K = 0;
  std::vector<std::int32_t> at;
  std::vector<T> wt;

  explicit InvertedTaps(const Geometry<T>& g) {
    const std::int64_t n = g.win[2];
    const ResampleTaps& last = g.taps[2];
    std::vector<int> count(static_cast<std::size_t>(n), 0);
    for (std::int64_t c = 0; c < g.out[2]; ++c)
      for (int t = 0; t < last.taps; ++t)
        ++count[static_cast<std::size_t>(t ? g.i1[c] : g.i0[c])];
    K = count.empty() ? 0 : *std::max_element(count.begin(), count.end());
    at.assign(static_cast<std::size_t>(K * n), 0);
    wt.assign(static_cast<std::size_t>(K * n), T(0));
    std::fill(count.begin(), count.end(), 0);
    for (std::int64_t c = 0; c < g.out[2]; ++c)
      for (int t = 0; t < last.taps; ++t) {
        const std::int64_t i = t ? g.i1[c] : g.i0[c];
        const auto slot = static_cast<std::size_t>(count[static_cast<std::size_t>(i)]++ * n + i);
        at[slot] = static_cast<std::int32_t>(c);
        wt[slot] = t ? g.w1[static_cast<std::size_t>(c)] : g.w0[static_cast<std::size_t>(c)];
      }
  }
};

template <typename T>
void forward(const Tensor& window, Tensor& output, const Geometry<T>& g) {
  const T* x = window.data<T>();
  T* y = output.data<T>();
  const std::int64_t n = g.out[2];
  g.for_each_row([&](const typename Geometry<T>::Plane& p, std::int64_t row, const RowBases& bases,
                     std::int64_t repeats) {
    T* out = y + p.output + row;
    const T* in = x + p.window;
    if (repeats >= 0) {
      std::memcpy(out, y + p.output + repeats, static_cast<std::size_t>(n) * sizeof(T));
    } else if (g.nearest) {
      copy_row(in + bases.at[0].offset, g.i0.data(), out, n);
    } else if (bases.n == 1 && bases.at[0].weight == 1.0) {
      lerp_row(in + bases.at[0].offset, g.i0.data(), g.i1.data(), g.w0.data(), g.w1.data(), out, n);
    } else {
      // The outer dims first, on whole input rows (no gathers), then the last.
      thread_local std::vector<T> mixed;
      mixed.resize(static_cast<std::size_t>(g.win[2]));
      const T* rows[kMaxBases];
      T weights[kMaxBases];
      for (int b = 0; b < bases.n; ++b) {
        rows[b] = in + bases.at[b].offset;
        weights[b] = static_cast<T>(bases.at[b].weight);
      }
      mix_rows(rows, weights, bases.n, mixed.data(), g.win[2]);
      lerp_row(mixed.data(), g.i0.data(), g.i1.data(), g.w0.data(), g.w1.data(), out, n);
    }
  });
}

template <typename T>
void backward(const Tensor& grad_output, Tensor& grad_window, const Geometry<T>& g,
              bool accumulate) {
  const T* gy = grad_output.data<T>();
  T* gx = grad_window.data<T>();
  if (!accumulate) std::fill(gx, gx + grad_window.numel(), T(0));
  const InvertedTaps<T> inv(g);
  g.for_each_row([&](const typename Geometry<T>::Plane& p, std::int64_t row, const RowBases& bases,
                     std::int64_t) {
    const T* in = gy + p.output + row;
    for (int b = 0; b < bases.n; ++b)
      gather_row(in, static_cast<T>(bases.at[b].weight), inv.at.data(), inv.wt.data(), inv.K,
                 gx + p.window + bases.at[b].offset, g.win[2]);
  });
}
void run_forward(const kernels::UpsampleForwardArgs& a) {
  DTENSOR_CHECK_ARG(a.output.shape() == kernels::resample_output_shape(a.window.shape(), a.dims),
                    "upsample", "internal: output {} for outputs {}", shape_str(a.output.shape()),
                    shape_str(kernels::resample_output_shape(a.window.shape(), a.dims)));
  const Tensor x = in_compute_strided(a.window);
  compute_into(a.output, [&](auto t, Tensor& y) {
    using T = decltype(t);
    forward<T>(x, y, Geometry<T>(x, y, a.dims));
  });
}

void run_backward(const kernels::UpsampleBackwardArgs& a) {
  DTENSOR_CHECK_ARG(
      a.grad_output.shape() == kernels::resample_output_shape(a.grad_window.shape(), a.dims),
      "upsample", "internal: local grad_output {} but the outputs are {}",
      shape_str(a.grad_output.shape()),
      shape_str(kernels::resample_output_shape(a.grad_window.shape(), a.dims)));
  const Tensor gy = a.accumulate ? in_compute_strided(a.grad_output) : in_compute(a.grad_output);
  const auto body = [&](auto t, Tensor& gx) {
    using T = decltype(t);
    DTENSOR_CHECK_ARG(a.accumulate || gx.is_contiguous(), "upsample",
                      "internal: the backward's window gradient must be contiguous");
    backward<T>(gy, gx, Geometry<T>(gx, gy, a.dims), a.accumulate);
  };
  compute_into(a.grad_window, body, a.accumulate);
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
