// CPU kernels of the pools (dtensor/ops/kernels/pool.h): f32 and f64 in
// their own type, bf16 and f16 widened to f32 and rounded once.
//
// The taps are flattened once per call into offsets within a plane (per
// dim, a start index per output into one array), so the inner loops read
// two small arrays instead of a vector per output; planes (N * C) run in
// parallel on the rank's threads.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "backends/cpu/compute_type.h"
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
struct Geometry {
  std::int64_t planes = 0, win_plane = 1, out_plane = 1;
  FlatTaps dim[3];
  const PoolTaps* taps[3] = {nullptr, nullptr, nullptr};

  Geometry(const Shape& window_shape, const std::vector<PoolTaps>& d) {
    DTENSOR_CHECK_ARG(!d.empty() && d.size() <= 3 && window_shape.size() == d.size() + 2, "pool",
                      "internal: pool over {} dims of a window {}", d.size(),
                      shape_str(window_shape));
    planes = window_shape[0] * window_shape[1];
    // Right-aligned: the last spatial dim is always dim[2], the inner loop.
    std::int64_t win[3] = {1, 1, 1};
    const std::size_t first = 3 - d.size();
    for (std::size_t i = 0; i < d.size(); ++i) {
      win[first + i] = window_shape[i + 2];
      taps[first + i] = &d[i];
    }
    const std::int64_t stride[3] = {win[1] * win[2], win[2], 1};
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
    win_plane = win[0] * win[1] * win[2];
    out_plane = dim[0].outputs() * dim[1].outputs() * dim[2].outputs();
    last_uniform = dim[2].uniform();
    last_contiguous = true;
    for (std::int64_t c = 0; c < dim[2].outputs() && last_contiguous; ++c)
      for (std::int64_t k = 1; k < dim[2].taps_of(c); ++k)
        last_contiguous = last_contiguous && dim[2].tap(c, k) == dim[2].tap(c, 0) + k;
  }
  std::optional<FlatTaps::Uniform> last_uniform;
  // Every output's taps along the last dim are consecutive elements (no
  // dilation): the average pools then add whole runs, in vector lanes.
  bool last_contiguous = false;

  // fn(plane, output index in plane, a, b, c) for every output, planes in parallel.
  template <typename Fn>
  void for_each_output(Fn&& fn) const {
    const bool parallel = planes > 1 && planes * out_plane >= (1 << 14);
#pragma omp parallel for schedule(static) if (parallel)
    for (std::int64_t p = 0; p < planes; ++p) {
      std::int64_t at = 0;
      for (std::int64_t a = 0; a < dim[0].outputs(); ++a)
        for (std::int64_t b = 0; b < dim[1].outputs(); ++b)
          for (std::int64_t c = 0; c < dim[2].outputs(); ++c)
            fn(p, at++, a, b, c);
    }
  }
  // The hot loops' form: fn(plane, index of the row's first output, bases)
  // for each row of outputs along the last dim, where `bases` are the
  // offsets the row's outer taps (dims 0 and 1, in kernel order) add; the
  // last dim's taps then come from dim[2] per output.
  template <typename Fn>
  void for_each_row(Fn&& fn) const {
    const bool parallel = planes > 1 && planes * out_plane >= (1 << 14);
#pragma omp parallel if (parallel)
    {
      std::vector<std::int64_t> bases;
#pragma omp for schedule(static)
      for (std::int64_t p = 0; p < planes; ++p) {
        std::int64_t at = 0;
        for (std::int64_t a = 0; a < dim[0].outputs(); ++a)
          for (std::int64_t b = 0; b < dim[1].outputs(); ++b) {
            bases.clear();
            for (std::int64_t i = dim[0].start[a]; i < dim[0].start[a + 1]; ++i)
              for (std::int64_t j = dim[1].start[b]; j < dim[1].start[b + 1]; ++j)
                bases.push_back(dim[0].offset[i] + dim[1].offset[j]);
            fn(p, at, bases);
            at += dim[2].outputs();
          }
      }
    }
  }
  // fn(offset in plane) over one output's taps, in kernel order.
  template <typename Fn>
  void for_each_tap(std::int64_t a, std::int64_t b, std::int64_t c, Fn&& fn) const {
    const auto* o0 = dim[0].offset.data();
    const auto* o1 = dim[1].offset.data();
    const auto* o2 = dim[2].offset.data();
    for (std::int64_t i = dim[0].start[a]; i < dim[0].start[a + 1]; ++i)
      for (std::int64_t j = dim[1].start[b]; j < dim[1].start[b + 1]; ++j) {
        const std::int64_t base = o0[i] + o1[j];
        for (std::int64_t k = dim[2].start[c]; k < dim[2].start[c + 1]; ++k)
          fn(base + o2[k]);
      }
  }
  // fn(offset in plane of the run's first tap, run length) for each row of
  // one output's taps along the last dim (last_contiguous only).
  template <typename Fn>
  void for_each_tap_run(std::int64_t a, std::int64_t b, std::int64_t c, Fn&& fn) const {
    const auto* o0 = dim[0].offset.data();
    const auto* o1 = dim[1].offset.data();
    const std::int64_t n = dim[2].taps_of(c);
    if (n == 0) return;
    const std::int64_t first = dim[2].tap(c, 0);
    for (std::int64_t i = dim[0].start[a]; i < dim[0].start[a + 1]; ++i)
      for (std::int64_t j = dim[1].start[b]; j < dim[1].start[b + 1]; ++j)
        fn(o0[i] + o1[j] + first, n);
  }
  std::int64_t tap_count(std::int64_t a, std::int64_t b, std::int64_t c) const {
    return (dim[0].start[a + 1] - dim[0].start[a]) * (dim[1].start[b + 1] - dim[1].start[b]) *
           (dim[2].start[c + 1] - dim[2].start[c]);
  }
  double divisor(const AvgDivisor& r, std::int64_t a, std::int64_t b, std::int64_t c) const {
    if (r.divisor_override) return static_cast<double>(*r.divisor_override);
    if (!r.count_include_pad) return static_cast<double>(tap_count(a, b, c));
    double n = 1;
    const std::int64_t idx[3] = {a, b, c};
    for (int i = 0; i < 3; ++i)
      if (taps[i]) n *= static_cast<double>(taps[i]->padded_size[static_cast<std::size_t>(idx[i])]);
    return n;
  }
};

// The regular row's pick, output by output in vector lanes: every output
// reads the same tap pattern, so the taps are the outer loops and the
// outputs the vector one. The same rule as pick_row below.
template <typename T>
[[gnu::always_inline]] inline void pick_uniform(const T* plane, const std::int64_t* bases,
                                                std::int64_t nbases, std::int64_t outputs,
                                                std::int64_t first, std::int64_t stride,
                                                std::int64_t taps, std::int64_t dilation, T* best,
                                                std::int64_t* at) {
#pragma omp simd
  for (std::int64_t c = 0; c < outputs; ++c) {
    best[c] = -std::numeric_limits<T>::infinity();
    at[c] = bases[0] + first + c * stride;
  }
  for (std::int64_t b = 0; b < nbases; ++b)
    for (std::int64_t k = 0; k < taps; ++k) {
      const std::int64_t off = bases[b] + first + k * dilation;
#pragma omp simd
      for (std::int64_t c = 0; c < outputs; ++c) {
        const T v = plane[off + c * stride];
        const bool take = v > best[c] || std::isnan(v);
        best[c] = take ? v : best[c];
        at[c] = take ? off + c * stride : at[c];
      }
    }
}
DTENSOR_SIMD_CLONES void pick_uniform_rows(const float* plane, const std::int64_t* bases,
                                           std::int64_t nbases, std::int64_t outputs,
                                           std::int64_t first, std::int64_t stride,
                                           std::int64_t taps, std::int64_t dilation, float* best,
                                           std::int64_t* at) {
  pick_uniform(plane, bases, nbases, outputs, first, stride, taps, dilation, best, at);
}
DTENSOR_SIMD_CLONES void pick_uniform_rows(const double* plane, const std::int64_t* bases,
                                           std::int64_t nbases, std::int64_t outputs,
                                           std::int64_t first, std::int64_t stride,
                                           std::int64_t taps, std::int64_t dilation, double* best,
                                           std::int64_t* at) {
  pick_uniform(plane, bases, nbases, outputs, first, stride, taps, dilation, best, at);
}

// The tap each output of a row picks: PyTorch's rule, a strictly greater
// value or any NaN takes the place, so equal maxima keep the first (in kernel
// order) and the last NaN wins. fn(output index in the row, value, tap).
template <typename T, typename Fn>
void pick_row(const T* plane, const Geometry& g, const std::vector<std::int64_t>& bases, Fn&& fn) {
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
  thread_local std::vector<std::int64_t> at;
  best.resize(static_cast<std::size_t>(n));
  at.resize(static_cast<std::size_t>(n));
  pick_uniform_rows(plane, bases.data(), static_cast<std::int64_t>(bases.size()), n, u.first,
                    u.stride, u.taps, u.dilation, best.data(), at.data());
  // In output order, as one by one: the backward's scatter adds in this order.
  one_by_one(0, u.begin);
  for (std::int64_t c = 0; c < n; ++c)
    fn(u.begin + c, best[static_cast<std::size_t>(c)], at[static_cast<std::size_t>(c)]);
  one_by_one(u.end, last.outputs());
}

template <typename T>
void max_forward(const Tensor& window, Tensor& output, const Geometry& g) {
  const T* x = window.data<T>();
  T* y = output.data<T>();
  g.for_each_row([&](std::int64_t p, std::int64_t row, const std::vector<std::int64_t>& bases) {
    T* out = y + p * g.out_plane + row;
    pick_row(x + p * g.win_plane, g, bases,
             [&](std::int64_t c, T best, std::int64_t) { out[c] = best; });
  });
}

template <typename T>
void max_backward(const Tensor& window, const Tensor& grad_output, Tensor& grad_window,
                  const Geometry& g) {
  const T* x = window.data<T>();
  const T* gy = grad_output.data<T>();
  T* gx = grad_window.data<T>();
  std::fill(gx, gx + grad_window.numel(), T(0));
  // Planes are disjoint: the scatter of one plane stays in its thread.
  g.for_each_row([&](std::int64_t p, std::int64_t row, const std::vector<std::int64_t>& bases) {
    const T* in = gy + p * g.out_plane + row;
    T* plane = gx + p * g.win_plane;
    pick_row(x + p * g.win_plane, g, bases, [&](std::int64_t c, T, std::int64_t at) {
      if (at >= 0) plane[at] += in[c];
    });
  });
}

template <typename T>
void avg_forward(const Tensor& window, Tensor& output, const Geometry& g, const AvgDivisor& r) {
  const T* x = window.data<T>();
  T* y = output.data<T>();
  g.for_each_output([&](std::int64_t p, std::int64_t o, std::int64_t a, std::int64_t b,
                        std::int64_t c) {
    const T* plane = x + p * g.win_plane;
    double sum = 0;
    if (g.last_contiguous) {
      g.for_each_tap_run(a, b, c, [&](std::int64_t off, std::int64_t n) {
        const T* run = plane + off;
        T part = 0;  // a run is one window row: short enough for T
#pragma omp simd reduction(+ : part)
        for (std::int64_t k = 0; k < n; ++k)
          part += run[k];
        sum += static_cast<double>(part);
      });
    } else {
      g.for_each_tap(a, b, c, [&](std::int64_t off) { sum += static_cast<double>(plane[off]); });
    }
    y[p * g.out_plane + o] = static_cast<T>(sum / g.divisor(r, a, b, c));
  });
}

template <typename T>
void avg_backward(const Tensor& grad_output, Tensor& grad_window, const Geometry& g,
                  const AvgDivisor& r) {
  const T* gy = grad_output.data<T>();
  T* gx = grad_window.data<T>();
  std::fill(gx, gx + grad_window.numel(), T(0));
  g.for_each_output(
      [&](std::int64_t p, std::int64_t o, std::int64_t a, std::int64_t b, std::int64_t c) {
        T* plane = gx + p * g.win_plane;
        const T share =
            static_cast<T>(static_cast<double>(gy[p * g.out_plane + o]) / g.divisor(r, a, b, c));
        if (g.last_contiguous) {
          g.for_each_tap_run(a, b, c, [&](std::int64_t off, std::int64_t n) {
            T* run = plane + off;
#pragma omp simd
            for (std::int64_t k = 0; k < n; ++k)
              run[k] += share;
          });
        } else {
          g.for_each_tap(a, b, c, [&](std::int64_t off) { plane[off] += share; });
        }
      });
}

void run_max_forward(const kernels::MaxPoolForwardArgs& a) {
  const Geometry g(a.window.shape(), a.dims);
  const Tensor x = in_compute(a.window);
  compute_into(a.output, [&](auto t, Tensor& y) { max_forward<decltype(t)>(x, y, g); });
}

void run_max_backward(const kernels::MaxPoolBackwardArgs& a) {
  const Geometry g(a.window.shape(), a.dims);
  const Tensor x = in_compute(a.window), gy = in_compute(a.grad_output);
  compute_into(a.grad_window, [&](auto t, Tensor& gx) { max_backward<decltype(t)>(x, gy, gx, g); });
}

void run_avg_forward(const kernels::AvgPoolForwardArgs& a) {
  const Geometry g(a.window.shape(), a.dims);
  const Tensor x = in_compute(a.window);
  compute_into(a.output, [&](auto t, Tensor& y) { avg_forward<decltype(t)>(x, y, g, a.rule); });
}

void run_avg_backward(const kernels::AvgPoolBackwardArgs& a) {
  const Geometry g(a.grad_window.shape(), a.dims);
  const Tensor gy = in_compute(a.grad_output);
  compute_into(a.grad_window,
               [&](auto t, Tensor& gx) { avg_backward<decltype(t)>(gy, gx, g, a.rule); });
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
