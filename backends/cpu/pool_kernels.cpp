// CPU kernels of the pools (dtensor/ops/kernels/pool.h): f32 and f64 in
// their own type, bf16 and f16 widened to f32 and rounded once.
//
// The taps are flattened once per call into offsets within a plane (per
// dim, a start index per output into one array), so the inner loops read
// two small arrays instead of a vector per output; planes (N * C) run in
// parallel on the rank's threads. The forward reads its window and writes
// its output through their strides: the handlers run it on the tiles of a
// halo window where they lie, and on bands of the output.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "backends/cpu/compute_type.h"
#include "backends/cpu/parallel_region.h"
#include "backends/cpu/simd.h"
#include "dtensor/core/errors.h"
#include "dtensor/ops/kernels/pool.h"

namespace dtensor::cpu {
namespace {

using kernels::AvgDivisor;
using kernels::PoolTaps;

// One dim's taps as offsets within a plane: output o reads
// offset[start[o] .. start[o + 1]).
struct FlatTaps {
  std::vector<std::int64_t> start{0}, offset;
  std::int64_t outputs() const { return static_cast<std::int64_t>(start.size()) - 1; }

  // The regular part of a row: outputs begin <= c < end read
  // first + (c - begin) * stride + k * dilation for k < taps, every tap in
  // range. The pools of a U-Net (2x2, stride 2) are regular throughout; a
  // padded pool (3x3, stride 2, padding 1) is but for the outputs whose
  // window the padding clips, at the ends. Those run one by one, the rest
  // in vector lanes.
  struct Uniform {
    std::int64_t begin = 0, end = 0, first = 0, stride = 0, taps = 0, dilation = 0;
  };
  std::int64_t taps_of(std::int64_t c) const { return start[c + 1] - start[c]; }
  std::int64_t tap(std::int64_t c, std::int64_t k) const {
    return offset[static_cast<std::size_t>(start[c] + k)];
  }
  std::optional<Uniform> uniform() const {
    const std::int64_t n = outputs();
    Uniform u;
    for (std::int64_t c = 0; c < n; ++c)
      u.taps = std::max(u.taps, taps_of(c));
    if (u.taps < 1) return std::nullopt;
    while (u.begin < n && taps_of(u.begin) != u.taps)
      ++u.begin;  // clipped by the padding before the row
    if (u.begin + 1 >= n || taps_of(u.begin + 1) != u.taps) return std::nullopt;
    u.first = tap(u.begin, 0);
    u.dilation = u.taps > 1 ? tap(u.begin, 1) - u.first : 0;
    u.stride = tap(u.begin + 1, 0) - u.first;
    // Windows the padding clips to the same taps (a dim shorter than the
    // kernel, an adaptive pool with more outputs than inputs) look like a
    // run of stride 0: the backwards would add several outputs' gradients
    // into one place from vector lanes at once, which does not sum them.
    if (u.stride < 1) return std::nullopt;
    for (u.end = u.begin; u.end < n && taps_of(u.end) == u.taps; ++u.end) {
      bool regular = true;
      for (std::int64_t k = 0; k < u.taps && regular; ++k)
        regular = tap(u.end, k) == u.first + (u.end - u.begin) * u.stride + k * u.dilation;
      if (!regular) break;
    }
    return u;
  }
};

// Three spatial dims always: missing leading ones are one position with one tap.
// Offsets come from the tensors' strides, so the window and the output may
// be views (a tile of the window, a band of the output): each (n, c) plane
// starts at n * stride(0) + c * stride(1), and the output's last dim is
// written contiguously.
struct Geometry {
  std::int64_t planes = 0, channels = 1;
  std::int64_t win_stride[2] = {0, 0}, out_stride[2] = {0, 0};  // (n, c) of each
  std::int64_t out_row[2] = {0, 0};  // the output's strides of dims 0 and 1 (right-aligned)
  FlatTaps dim[3];
  const PoolTaps* taps[3] = {nullptr, nullptr, nullptr};

  Geometry(const Tensor& window, const Tensor& output, const std::vector<PoolTaps>& d) {
    const Shape& window_shape = window.shape();
    DTENSOR_CHECK_ARG(!d.empty() && d.size() <= 3 && window_shape.size() == d.size() + 2, "pool",
                      "internal: pool over {} dims of a window {}", d.size(),
                      shape_str(window_shape));
    planes = window_shape[0] * window_shape[1];
    channels = window_shape[1];
    // Right-aligned: the last spatial dim is always dim[2], the inner loop.
    std::int64_t stride[3] = {0, 0, 0};
    std::int64_t reach = 1;  // one past the farthest element of a plane
    const std::size_t first = 3 - d.size();
    for (std::size_t i = 0; i < d.size(); ++i) {
      taps[first + i] = &d[i];
      stride[first + i] = window.strides()[i + 2];
      reach += std::max<std::int64_t>(window_shape[i + 2] - 1, 0) * stride[first + i];
    }
    for (int i = 0; i < 3; ++i) {
      FlatTaps& f = dim[i];
      if (!taps[i]) {
        f.offset.push_back(0);
        f.start.push_back(1);
        continue;
      }
      for (const auto& t : taps[i]->taps) {
        for (auto w : t)
          f.offset.push_back(w * stride[i]);
        f.start.push_back(static_cast<std::int64_t>(f.offset.size()));
      }
    }
    DTENSOR_CHECK_ARG(reach < (std::int64_t{1} << 31), "pool",
                      "a window plane spanning {} elements: at most 2^31 - 1 per (N, C) plane",
                      reach);
    win_stride[0] = window.strides()[0];
    win_stride[1] = window.strides()[1];
    const Shape& out_shape = output.shape();
    DTENSOR_CHECK_ARG(out_shape.size() == window_shape.size() && out_shape[0] == window_shape[0] &&
                          out_shape[1] == window_shape[1],
                      "pool", "internal: output {} for a window {}", shape_str(out_shape),
                      shape_str(window_shape));
    for (std::size_t i = 0; i < d.size(); ++i)
      DTENSOR_CHECK_ARG(out_shape[i + 2] == static_cast<std::int64_t>(d[i].taps.size()), "pool",
                        "internal: output {} for {} outputs along spatial dim {}",
                        shape_str(out_shape), d[i].taps.size(), i);
    DTENSOR_CHECK_ARG(out_shape.back() <= 1 || output.strides().back() == 1, "pool",
                      "internal: the output's last dim must be contiguous");
    out_stride[0] = output.strides()[0];
    out_stride[1] = output.strides()[1];
    const std::size_t rank = out_shape.size();
    out_row[0] = d.size() >= 3 ? output.strides()[rank - 3] : 0;
    out_row[1] = d.size() >= 2 ? output.strides()[rank - 2] : 0;
    last_uniform = dim[2].uniform();
  }
  std::optional<FlatTaps::Uniform> last_uniform;

  // Where plane p starts in the window and in the output.
  struct Plane {
    std::int64_t window = 0, output = 0;
  };
  Plane plane(std::int64_t p) const {
    const std::int64_t n = p / channels, c = p % channels;
    return {n * win_stride[0] + c * win_stride[1], n * out_stride[0] + c * out_stride[1]};
  }

  // The hot loops' form: fn(where the plane starts, offset of the row's
  // first output in its output plane, a, b, bases) for each row (a, b) of outputs along the last
  // dim, where `bases` are the offsets the row's outer taps (dims 0 and 1, in kernel order) add;
  // the last dim's taps then come from dim[2] per output.
  template <typename Fn>
  void for_each_row(Fn&& fn) const {
    const std::int64_t out_plane = dim[0].outputs() * dim[1].outputs() * dim[2].outputs();
    const bool parallel = planes > 1 && planes * out_plane >= (1 << 14);
    parallel_region(parallel, [&] {
      std::vector<std::int64_t> bases;
#pragma omp for schedule(static)
      for (std::int64_t p = 0; p < planes; ++p) {
        const Plane at = plane(p);
        for (std::int64_t a = 0; a < dim[0].outputs(); ++a)
          for (std::int64_t b = 0; b < dim[1].outputs(); ++b) {
            bases.clear();
            for (std::int64_t i = dim[0].start[a]; i < dim[0].start[a + 1]; ++i)
              for (std::int64_t j = dim[1].start[b]; j < dim[1].start[b + 1]; ++j)
                bases.push_back(dim[0].offset[i] + dim[1].offset[j]);
            fn(at, a * out_row[0] + b * out_row[1], a, b, bases);
          }
      }
    });
  }
  // avg_pool's divisor is a product over the dims (count_include_pad: of
  // the padded window sizes; otherwise of the taps in range; an override is
  // one number): per dim, the factor of each output.
  std::vector<double> divisor_factors(const AvgDivisor& r, int i) const {
    const auto n = static_cast<std::size_t>(dim[i].outputs());
    std::vector<double> f(n, 1.0);
    if (r.divisor_override) {
      if (i == 2) std::fill(f.begin(), f.end(), static_cast<double>(*r.divisor_override));
    } else if (taps[i]) {
      for (std::size_t o = 0; o < n; ++o)
        f[o] =
            static_cast<double>(r.count_include_pad ? taps[i]->padded_size[o]
                                                    : dim[i].taps_of(static_cast<std::int64_t>(o)));
    }
    return f;
  }
};

// The regular row's pick, output by output in vector lanes: every output
// reads the same tap pattern, so the taps are the outer loops and the
// outputs the vector one. The same rule as pick_row below.
//
// kAt: also which tap (the backward's); the forward needs only the value.
// kStride: the stride known when it is 1 or 2 (0: `stride` at run time), so
// that the lanes load whole vectors and shuffle instead of gathering.
template <typename T, bool kAt, int kStride>
[[gnu::always_inline]] inline void pick_uniform(const T* plane, const std::int64_t* bases,
                                                std::int64_t nbases, std::int64_t outputs,
                                                std::int64_t first, std::int64_t run_stride,
                                                std::int64_t taps, std::int64_t dilation, T* best,
                                                std::int32_t* at) {
  const std::int64_t stride = kStride ? kStride : run_stride;
  const auto stride32 = static_cast<std::int32_t>(stride);
#pragma omp simd
  for (std::int64_t c = 0; c < outputs; ++c) {
    best[c] = -std::numeric_limits<T>::infinity();
    if constexpr (kAt) at[c] = static_cast<std::int32_t>(bases[0] + first + c * stride);
  }
  for (std::int64_t b = 0; b < nbases; ++b)
    for (std::int64_t k = 0; k < taps; ++k) {
      const std::int64_t off = bases[b] + first + k * dilation;
      const auto off32 = static_cast<std::int32_t>(off);
      const T* x = plane + off;
#pragma omp simd
      for (std::int64_t c = 0; c < outputs; ++c) {
        const T v = x[c * stride];
        const bool take = v > best[c] || std::isnan(v);
        best[c] = take ? v : best[c];
        if constexpr (kAt) at[c] = take ? off32 + static_cast<std::int32_t>(c) * stride32 : at[c];
      }
    }
}
template <typename T, bool kAt>
[[gnu::always_inline]] inline void pick_uniform_strided(const T* plane, const std::int64_t* bases,
                                                        std::int64_t nbases, std::int64_t outputs,
                                                        std::int64_t first, std::int64_t stride,
                                                        std::int64_t taps, std::int64_t dilation,
                                                        T* best, std::int32_t* at) {
  if (stride == 1)
    pick_uniform<T, kAt, 1>(plane, bases, nbases, outputs, first, 1, taps, dilation, best, at);
  else if (stride == 2)
    pick_uniform<T, kAt, 2>(plane, bases, nbases, outputs, first, 2, taps, dilation, best, at);
  else
    pick_uniform<T, kAt, 0>(plane, bases, nbases, outputs, first, stride, taps, dilation, best, at);
}
// `at` null: the values only. Taps as 32-bit offsets in the plane (twice
// the lanes of 64-bit ones; Geometry checks that a plane fits).
template <typename T>
[[gnu::always_inline]] inline void pick_uniform_any(const T* plane, const std::int64_t* bases,
                                                    std::int64_t nbases, std::int64_t outputs,
                                                    std::int64_t first, std::int64_t stride,
                                                    std::int64_t taps, std::int64_t dilation,
                                                    T* best, std::int32_t* at) {
  if (at)
    pick_uniform_strided<T, true>(plane, bases, nbases, outputs, first, stride, taps, dilation,
                                  best, at);
  else
    pick_uniform_strided<T, false>(plane, bases, nbases, outputs, first, stride, taps, dilation,
                                   best, at);
}
DTENSOR_SIMD_CLONES void pick_uniform_rows(const float* plane, const std::int64_t* bases,
                                           std::int64_t nbases, std::int64_t outputs,
                                           std::int64_t first, std::int64_t stride,
                                           std::int64_t taps, std::int64_t dilation, float* best,
                                           std::int32_t* at) {
  pick_uniform_any(plane, bases, nbases, outputs, first, stride, taps, dilation, best, at);
}
DTENSOR_SIMD_CLONES void pick_uniform_rows(const double* plane, const std::int64_t* bases,
                                           std::int64_t nbases, std::int64_t outputs,
                                           std::int64_t first, std::int64_t stride,
                                           std::int64_t taps, std::int64_t dilation, double* best,
                                           std::int32_t* at) {
  pick_uniform_any(plane, bases, nbases, outputs, first, stride, taps, dilation, best, at);
}

// The tap each output of a row picks: PyTorch's rule, a strictly greater
// value or any NaN takes the place, so equal maxima keep the first (in kernel
// order) and the last NaN wins. The outputs the padding clips go to
// fn(output index in the row, value, tap) one by one; the regular block to
// block(its first output, count, values, taps) at once. Without kAt the taps
// are not tracked (fn gets -1, block nullptr).
template <bool kAt, typename T, typename Fn, typename Block>
void pick_row(const T* plane, const Geometry& g, const std::vector<std::int64_t>& bases, Fn&& fn,
              Block&& block) {
  const FlatTaps& last = g.dim[2];
  const std::int64_t* off = last.offset.data();
  // Outputs [lo, hi) one by one.
  const auto one_by_one = [&](std::int64_t lo, std::int64_t hi) {
    for (std::int64_t c = lo; c < hi; ++c) {
      T best = -std::numeric_limits<T>::infinity();
      const std::int64_t k0 = last.start[c], k1 = last.start[c + 1];
      std::int64_t at = k0 < k1 && !bases.empty() ? bases[0] + off[k0] : -1;
      for (const std::int64_t base : bases)
        for (std::int64_t k = k0; k < k1; ++k) {
          const T v = plane[base + off[k]];
          // Selects, not branches: on data the comparison is a coin toss.
          const bool take = v > best || std::isnan(v);
          best = take ? v : best;
          at = take ? base + off[k] : at;
        }
      fn(c, best, at);
    }
  };
  if (!g.last_uniform || bases.empty()) return one_by_one(0, last.outputs());
  const auto& u = *g.last_uniform;
  const std::int64_t n = u.end - u.begin;
  // Per-thread scratch for one row: the values and taps picked.
  thread_local std::vector<T> best;
  thread_local std::vector<std::int32_t> at;
  best.resize(static_cast<std::size_t>(n));
  if (kAt) at.resize(static_cast<std::size_t>(n));
  pick_uniform_rows(plane, bases.data(), static_cast<std::int64_t>(bases.size()), n, u.first,
                    u.stride, u.taps, u.dilation, best.data(), kAt ? at.data() : nullptr);
  // In output order, as one by one.
  one_by_one(0, u.begin);
  block(u.begin, n, best.data(), kAt ? at.data() : nullptr);
  one_by_one(u.end, last.outputs());
}

// plane[at[c]] += g[c] for c < n, where outputs m apart never pick the same
// element (their windows are disjoint): m passes, each a vector scatter.
template <typename T>
[[gnu::always_inline]] inline void scatter_add(T* plane, const std::int32_t* at, const T* g,
                                               std::int64_t n, std::int64_t m) {
  if (m == 1) {
    for (std::int64_t c = 0; c < n; ++c)
      plane[at[c]] += g[c];
    return;
  }
  for (std::int64_t r = 0; r < m; ++r) {
#pragma omp simd
    for (std::int64_t c = r; c < n; c += m)
      plane[at[c]] += g[c];
  }
}
DTENSOR_SIMD_CLONES void scatter_add_rows(float* plane, const std::int32_t* at, const float* g,
                                          std::int64_t n, std::int64_t m) {
  scatter_add(plane, at, g, n, m);
}
DTENSOR_SIMD_CLONES void scatter_add_rows(double* plane, const std::int32_t* at, const double* g,
                                          std::int64_t n, std::int64_t m) {
  scatter_add(plane, at, g, n, m);
}

template <typename T>
void max_forward(const Tensor& window, Tensor& output, const Geometry& g) {
  const T* x = window.data<T>();
  T* y = output.data<T>();
  g.for_each_row([&](const Geometry::Plane& p, std::int64_t row, std::int64_t, std::int64_t,
                     const std::vector<std::int64_t>& bases) {
    T* out = y + p.output + row;
    pick_row<false>(
        x + p.window, g, bases, [&](std::int64_t c, T best, std::int64_t) { out[c] = best; },
        [&](std::int64_t begin, std::int64_t n, const T* best, const std::int32_t*) {
          std::copy(best, best + n, out + begin);
        });
  });
}

template <typename T>
void max_backward(const Tensor& window, const Tensor& grad_output, Tensor& grad_window,
                  const Geometry& g, bool accumulate) {
  const T* x = window.data<T>();
  const T* gy = grad_output.data<T>();
  T* gx = grad_window.data<T>();
  if (!accumulate) std::fill(gx, gx + grad_window.numel(), T(0));
  // Outputs this many apart along the last dim have disjoint windows.
  std::int64_t apart = 1;
  if (const auto& u = g.last_uniform; u && u->stride > 0) {
    const std::int64_t extent = (u->taps - 1) * u->dilation + 1;
    apart = (extent + u->stride - 1) / u->stride;
  }
  // Planes are disjoint: the scatter of one plane stays in its thread.
  g.for_each_row([&](const Geometry::Plane& p, std::int64_t row, std::int64_t, std::int64_t,
                     const std::vector<std::int64_t>& bases) {
    const T* in = gy + p.output + row;
    T* plane = gx + p.window;
    pick_row<true>(
        x + p.window, g, bases,
        [&](std::int64_t c, T, std::int64_t at) {
          if (at >= 0) plane[at] += in[c];
        },
        [&](std::int64_t begin, std::int64_t n, const T*, const std::int32_t* at) {
          scatter_add_rows(plane, at, in + begin, n, apart);
        });
  });
}

// The regular row's sums, outputs in vector lanes (as pick_uniform): the
// taps are the outer loops, so every lane adds in kernel order.
template <typename T>
[[gnu::always_inline]] inline void sum_uniform(const T* plane, const std::int64_t* bases,
                                               std::int64_t nbases, std::int64_t outputs,
                                               std::int64_t first, std::int64_t stride,
                                               std::int64_t taps, std::int64_t dilation, T* sum) {
#pragma omp simd
  for (std::int64_t c = 0; c < outputs; ++c)
    sum[c] = 0;
  for (std::int64_t b = 0; b < nbases; ++b)
    for (std::int64_t k = 0; k < taps; ++k) {
      const T* x = plane + bases[b] + first + k * dilation;
#pragma omp simd
      for (std::int64_t c = 0; c < outputs; ++c)
        sum[c] += x[c * stride];
    }
}
// The transposed: every tap of output c gets share[c]. Within one tap the
// lanes write distinct elements (stride >= 1), so overlapping windows add
// correctly, tap after tap.
template <typename T>
[[gnu::always_inline]] inline void spread_uniform(T* plane, const std::int64_t* bases,
                                                  std::int64_t nbases, std::int64_t outputs,
                                                  std::int64_t first, std::int64_t stride,
                                                  std::int64_t taps, std::int64_t dilation,
                                                  const T* share) {
  for (std::int64_t b = 0; b < nbases; ++b)
    for (std::int64_t k = 0; k < taps; ++k) {
      T* x = plane + bases[b] + first + k * dilation;
#pragma omp simd
      for (std::int64_t c = 0; c < outputs; ++c)
        x[c * stride] += share[c];
    }
}
DTENSOR_SIMD_CLONES void sum_uniform_rows(const float* plane, const std::int64_t* bases,
                                          std::int64_t nbases, std::int64_t outputs,
                                          std::int64_t first, std::int64_t stride,
                                          std::int64_t taps, std::int64_t dilation, float* sum) {
  sum_uniform(plane, bases, nbases, outputs, first, stride, taps, dilation, sum);
}
DTENSOR_SIMD_CLONES void spread_uniform_rows(float* plane, const std::int64_t* bases,
                                             std::int64_t nbases, std::int64_t outputs,
                                             std::int64_t first, std::int64_t stride,
                                             std::int64_t taps, std::int64_t dilation,
                                             const float* share) {
  spread_uniform(plane, bases, nbases, outputs, first, stride, taps, dilation, share);
}
DTENSOR_SIMD_CLONES void sum_uniform_rows(const double* plane, const std::int64_t* bases,
                                          std::int64_t nbases, std::int64_t outputs,
                                          std::int64_t first, std::int64_t stride,
                                          std::int64_t taps, std::int64_t dilation, double* sum) {
  sum_uniform(plane, bases, nbases, outputs, first, stride, taps, dilation, sum);
}
DTENSOR_SIMD_CLONES void spread_uniform_rows(double* plane, const std::int64_t* bases,
                                             std::int64_t nbases, std::int64_t outputs,
                                             std::int64_t first, std::int64_t stride,
                                             std::int64_t taps, std::int64_t dilation,
                                             const double* share) {
  spread_uniform(plane, bases, nbases, outputs, first, stride, taps, dilation, share);
}

// avg_pool's divisors, per dim, in the compute type.
template <typename T>
struct Divisors {
  std::vector<double> outer[2];
  std::vector<T> last;
  Divisors(const Geometry& g, const AvgDivisor& r)
      : outer{g.divisor_factors(r, 0), g.divisor_factors(r, 1)} {
    const auto f = g.divisor_factors(r, 2);
    last.assign(f.begin(), f.end());
  }
  T row(std::int64_t a, std::int64_t b) const {
    return static_cast<T>(outer[0][static_cast<std::size_t>(a)] *
                          outer[1][static_cast<std::size_t>(b)]);
  }
};

template <typename T>
void avg_forward(const Tensor& window, Tensor& output, const Geometry& g, const AvgDivisor& r) {
  const T* x = window.data<T>();
  T* y = output.data<T>();
  const Divisors<T> d(g, r);
  const FlatTaps& last = g.dim[2];
  g.for_each_row([&](const Geometry::Plane& p, std::int64_t row, std::int64_t a, std::int64_t b,
                     const std::vector<std::int64_t>& bases) {
    const T* plane = x + p.window;
    T* out = y + p.output + row;
    const T rd = d.row(a, b);
    std::int64_t begin = 0, end = 0;
    if (g.last_uniform && !bases.empty()) {
      const auto& u = *g.last_uniform;
      begin = u.begin;
      end = u.end;
      sum_uniform_rows(plane, bases.data(), static_cast<std::int64_t>(bases.size()), end - begin,
                       u.first, u.stride, u.taps, u.dilation, out + begin);
#pragma omp simd
      for (std::int64_t c = begin; c < end; ++c)
        out[c] /= rd * d.last[static_cast<std::size_t>(c)];
    }
    // The rest one by one (the outputs the padding clips, an adaptive
    // pool's): a run of consecutive taps is summed in vector lanes.
    const auto one_by_one = [&](std::int64_t lo, std::int64_t hi) {
      for (std::int64_t c = lo; c < hi; ++c) {
        const std::int64_t n = last.taps_of(c);
        const bool run = n > 0 && last.tap(c, n - 1) - last.tap(c, 0) == n - 1;
        T sum = 0;
        for (const std::int64_t base : bases) {
          if (run) {
            const T* x = plane + base + last.tap(c, 0);
#pragma omp simd reduction(+ : sum)
            for (std::int64_t k = 0; k < n; ++k)
              sum += x[k];
          } else {
            for (std::int64_t k = 0; k < n; ++k)
              sum += plane[base + last.tap(c, k)];
          }
        }
        out[c] = sum / (rd * d.last[static_cast<std::size_t>(c)]);
      }
    };
    one_by_one(0, begin);
    one_by_one(end, last.outputs());
  });
}

template <typename T>
void avg_backward(const Tensor& grad_output, Tensor& grad_window, const Geometry& g,
                  const AvgDivisor& r, bool accumulate) {
  const T* gy = grad_output.data<T>();
  T* gx = grad_window.data<T>();
  if (!accumulate) std::fill(gx, gx + grad_window.numel(), T(0));
  const Divisors<T> d(g, r);
  const FlatTaps& last = g.dim[2];
  g.for_each_row([&](const Geometry::Plane& p, std::int64_t row, std::int64_t a, std::int64_t b,
                     const std::vector<std::int64_t>& bases) {
    T* plane = gx + p.window;
    const T* in = gy + p.output + row;
    const T rd = d.row(a, b);
    // Per thread: one row's shares.
    thread_local std::vector<T> share;
    share.resize(static_cast<std::size_t>(last.outputs()));
    for (std::int64_t c = 0; c < last.outputs(); ++c)
      share[static_cast<std::size_t>(c)] = in[c] / (rd * d.last[static_cast<std::size_t>(c)]);
    std::int64_t begin = 0, end = 0;
    if (g.last_uniform && !bases.empty()) {
      const auto& u = *g.last_uniform;
      begin = u.begin;
      end = u.end;
      spread_uniform_rows(plane, bases.data(), static_cast<std::int64_t>(bases.size()), end - begin,
                          u.first, u.stride, u.taps, u.dilation, share.data() + begin);
    }
    const auto one_by_one = [&](std::int64_t lo, std::int64_t hi) {
      for (std::int64_t c = lo; c < hi; ++c) {
        const std::int64_t n = last.taps_of(c);
        const bool run = n > 0 && last.tap(c, n - 1) - last.tap(c, 0) == n - 1;
        const T v = share[static_cast<std::size_t>(c)];
        for (const std::int64_t base : bases) {
          if (run) {
            T* x = plane + base + last.tap(c, 0);
#pragma omp simd
            for (std::int64_t k = 0; k < n; ++k)
              x[k] += v;
          } else {
            for (std::int64_t k = 0; k < n; ++k)
              plane[base + last.tap(c, k)] += v;
          }
        }
      }
    };
    one_by_one(0, begin);
    one_by_one(end, last.outputs());
  });
}

// The backward's window gradient: overwritten, contiguous; or, with
// `accumulate`, added into as it lies. max_pool's is laid out as its window
// (a tap is one offset into both).
void check_gradient_layout(const Tensor& grad_window, const Tensor& window, bool accumulate) {
  if (accumulate) {
    DTENSOR_CHECK_ARG(kernels::same_layout(grad_window, window), "pool",
                      "internal: the window and its gradient must be laid out alike");
    return;
  }
  DTENSOR_CHECK_ARG(grad_window.is_contiguous() && window.is_contiguous() &&
                        window.shape() == grad_window.shape(),
                    "pool", "internal: the backward's window and gradient must be contiguous");
}

void run_max_forward(const kernels::MaxPoolForwardArgs& a) {
  const Tensor x = in_compute_strided(a.window);
  compute_into(a.output,
               [&](auto t, Tensor& y) { max_forward<decltype(t)>(x, y, Geometry(x, y, a.dims)); });
}

void run_max_backward(const kernels::MaxPoolBackwardArgs& a) {
  const Tensor x = a.accumulate ? in_compute_strided(a.window) : in_compute(a.window);
  const Tensor gy = a.accumulate ? in_compute_strided(a.grad_output) : in_compute(a.grad_output);
  compute_into(
      a.grad_window,
      [&](auto t, Tensor& gx) {
        check_gradient_layout(gx, x, a.accumulate);
        max_backward<decltype(t)>(x, gy, gx, Geometry(x, gy, a.dims), a.accumulate);
      },
      a.accumulate);
}

void run_avg_forward(const kernels::AvgPoolForwardArgs& a) {
  const Tensor x = in_compute_strided(a.window);
  compute_into(a.output, [&](auto t, Tensor& y) {
    avg_forward<decltype(t)>(x, y, Geometry(x, y, a.dims), a.rule);
  });
}

void run_avg_backward(const kernels::AvgPoolBackwardArgs& a) {
  const Tensor gy = a.accumulate ? in_compute_strided(a.grad_output) : in_compute(a.grad_output);
  compute_into(
      a.grad_window,
      [&](auto t, Tensor& gx) {
        check_gradient_layout(gx, gx, a.accumulate);
        avg_backward<decltype(t)>(gy, gx, Geometry(gx, gy, a.dims), a.rule, a.accumulate);
      },
      a.accumulate);
}

struct Registrar {
  Registrar() {
    for (DType dt : {DType::F32, DType::F64, DType::BF16, DType::F16}) {
      register_kernel(kernels::kMaxPoolForward, DeviceType::CPU, dt,
                      KernelFunction<kernels::MaxPoolForwardArgs>(run_max_forward));
      register_kernel(kernels::kMaxPoolBackward, DeviceType::CPU, dt,
                      KernelFunction<kernels::MaxPoolBackwardArgs>(run_max_backward));
      register_kernel(kernels::kAvgPoolForward, DeviceType::CPU, dt,
                      KernelFunction<kernels::AvgPoolForwardArgs>(run_avg_forward));
      register_kernel(kernels::kAvgPoolBackward, DeviceType::CPU, dt,
                      KernelFunction<kernels::AvgPoolBackwardArgs>(run_avg_backward));
    }
  }
};
const Registrar registrar;

}  // namespace
}  // namespace dtensor::cpu
