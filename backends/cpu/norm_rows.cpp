#include "backends/cpu/norm_rows.h"

#include <algorithm>
#include <type_traits>

#include "backends/cpu/simd.h"

namespace dtensor::cpu {
namespace {

// A mean as two C values, hi + lo: (x - hi) - lo keeps f32 data's deviations
// exact to f32 rounding even when the mean is far from zero (x - hi is exact
// by Sterbenz's lemma near the mean), where x - float(mean) would carry the
// mean's rounding, |mean| * 6e-8, into every normalised value.
template <typename C>
struct SplitMean {
  C hi, lo;
  explicit SplitMean(double m)
      : hi(static_cast<C>(m)), lo(static_cast<C>(m - static_cast<double>(hi))) {}
};

template <typename C>
[[gnu::always_inline]] inline void moments_of(const C* x, std::int64_t s, double& mean,
                                              double& m2) {
  const double sum = blocked_sum(s, [&](std::int64_t b, std::int64_t e) DTENSOR_INLINE_LAMBDA {
    C acc = 0;
#pragma omp simd reduction(+ : acc)
    for (std::int64_t j = b; j < e; ++j)
      acc += x[j];
    return acc;
  });
  mean = s > 0 ? sum / static_cast<double>(s) : 0.0;
  const C mc = static_cast<C>(mean);
  // Squared deviations from the mean rounded to C, corrected by
  // (sum(x - mc))^2 / n: exactly M2 around the true mean, in one pass.
  double dev = 0;
  const double sq = blocked_sum(s, [&](std::int64_t b, std::int64_t e) DTENSOR_INLINE_LAMBDA {
    C acc = 0, d1 = 0;
#pragma omp simd reduction(+ : acc, d1)
    for (std::int64_t j = b; j < e; ++j) {
      const C d = x[j] - mc;
      acc += d * d;
      d1 += d;
    }
    dev += static_cast<double>(d1);
    return acc;
  });
  m2 = s > 0 ? sq - dev * dev / static_cast<double>(s) : 0.0;
  if (m2 < 0) m2 = 0;
  // The first pass's mean carries the rounding of its f32 partial sums
  // (2e-5 at |x| = 300); the deviations from mc are exact, so mc + their
  // mean is the mean to f64 rounding. Merging rows needs it: Chan's update
  // weighs the difference of two rows' means by their counts.
  if (s > 0) mean = static_cast<double>(mc) + dev / static_cast<double>(s);
}

template <typename C>
[[gnu::always_inline]] inline void affine(const C* x, C* y, std::int64_t s, const RowAffine& f) {
  const SplitMean<C> m(f.m);
  const C a = static_cast<C>(f.a), b = static_cast<C>(f.b);
  const bool relu = f.relu;
#pragma omp simd
  for (std::int64_t j = 0; j < s; ++j) {
    const C v = ((x[j] - m.hi) - m.lo) * a + b;
    y[j] = relu && v < 0 ? C(0) : v;  // keeps NaN, as PyTorch's relu
  }
}

template <typename C>
[[gnu::always_inline]] inline void affine_elementwise(const C* x, C* y, std::int64_t s, double m,
                                                      double invstd, const C* w, const C* b,
                                                      bool relu) {
  const SplitMean<C> mc(m);
  const C ic = static_cast<C>(invstd);
  // The missing weight or bias decided outside the loop: a test on a null
  // pointer inside it kept GCC from vectorising (layer_norm without affine
  // ran at 10 ns an element).
  const auto run = [&](auto has_w, auto has_b) DTENSOR_INLINE_LAMBDA {
#pragma omp simd
    for (std::int64_t j = 0; j < s; ++j) {
      C v = ((x[j] - mc.hi) - mc.lo) * ic;
      if constexpr (has_w()) v *= w[j];
      if constexpr (has_b()) v += b[j];
      y[j] = relu && v < 0 ? C(0) : v;
    }
  };
  using yes = std::true_type;
  using no = std::false_type;
  if (w && b)
    run(yes{}, yes{});
  else if (w)
    run(yes{}, no{});
  else if (b)
    run(no{}, yes{});
  else
    run(no{}, no{});
}

// One block of the backward's first pass: g += sum(dy * w), acc += sum(dy * w * (x - mc)).
template <typename C>
[[gnu::always_inline]] inline void reduce_weighted(const C* dy, const C* w, const C* x, C mc,
                                                   std::int64_t b, std::int64_t e, C& g, C& acc) {
#pragma omp simd reduction(+ : acc, g)
  for (std::int64_t j = b; j < e; ++j) {
    const C gj = dy[j] * w[j];
    g += gj;
    acc += gj * (x[j] - mc);
  }
}
// The same with weight 1 (a per-channel weight is applied to the row's sums).
template <typename C>
[[gnu::always_inline]] inline void reduce_plain(const C* dy, const C* x, C mc, std::int64_t b,
                                                std::int64_t e, C& g, C& acc) {
#pragma omp simd reduction(+ : acc, g)
  for (std::int64_t j = b; j < e; ++j) {
    g += dy[j];
    acc += dy[j] * (x[j] - mc);
  }
}

template <typename C>
[[gnu::always_inline]] inline RowReduce backward_reduce(const C* dy, const C* x, std::int64_t s,
                                                        double w, const C* w_elem) {
  RowReduce r;
  moments_of(x, s, r.mean, r.m2);
  const C mc = static_cast<C>(r.mean);
  double gsum = 0;
  const double h = blocked_sum(s, [&](std::int64_t b, std::int64_t e) DTENSOR_INLINE_LAMBDA {
    C acc = 0, g = 0;
    if (w_elem)
      reduce_weighted(dy, w_elem, x, mc, b, e, g, acc);
    else
      reduce_plain(dy, x, mc, b, e, g, acc);
    gsum += static_cast<double>(g);
    return acc;
  });
  // H around the exact mean: sum(g (x - mean)) = sum(g (x - mc)) - (mean - mc) G.
  const double scale = w_elem ? 1.0 : w;
  r.g = gsum * scale;
  r.h = (h - (r.mean - static_cast<double>(mc)) * gsum) * scale;
  return r;
}

// One block of the backward's second pass: gx = dy * a + (x - m) * b + c,
// d += sum(dy), acc += sum(dy * (x - m)).
template <typename C>
[[gnu::always_inline]] inline void apply_block(const C* dy, const C* x, C* gx, SplitMean<C> m, C a,
                                               C b, C c, std::int64_t lo, std::int64_t hi, C& d,
                                               C& acc) {
#pragma omp simd reduction(+ : acc, d)
  for (std::int64_t j = lo; j < hi; ++j) {
    const C xc = (x[j] - m.hi) - m.lo;
    gx[j] = dy[j] * a + xc * b + c;
    d += dy[j];
    acc += dy[j] * xc;
  }
}
// The sums alone, when the input's gradient is not wanted.
template <typename C>
[[gnu::always_inline]] inline void sums_block(const C* dy, const C* x, SplitMean<C> m,
                                              std::int64_t lo, std::int64_t hi, C& d, C& acc) {
#pragma omp simd reduction(+ : acc, d)
  for (std::int64_t j = lo; j < hi; ++j) {
    d += dy[j];
    acc += dy[j] * ((x[j] - m.hi) - m.lo);
  }
}

template <typename C>
[[gnu::always_inline]] inline RowSums backward_apply(const C* dy, const C* x, C* gx, std::int64_t s,
                                                     const RowBackward& f) {
  const SplitMean<C> m(f.m);
  const C a = static_cast<C>(f.a), b = static_cast<C>(f.b), c = static_cast<C>(f.c);
  RowSums r;
  double dsum = 0;
  r.dy_xc = blocked_sum(s, [&](std::int64_t lo, std::int64_t hi) DTENSOR_INLINE_LAMBDA {
    C acc = 0, d = 0;
    if (gx)
      apply_block(dy, x, gx, m, a, b, c, lo, hi, d, acc);
    else
      sums_block(dy, x, m, lo, hi, d, acc);
    dsum += static_cast<double>(d);
    return acc;
  });
  r.dy = dsum;
  return r;
}

// A row is walked in blocks that stay in L1 across the passes over them
// (its gradient, then its parameters' sums): a layer_norm row is a whole
// sample's slice, too large to stay in L2 between whole-row passes.
constexpr std::int64_t kElementwiseBlock = 1024;

// One block of the input's gradient, with per-element weight w (WithWeight)
// or none.
template <bool WithWeight, typename C>
[[gnu::always_inline]] inline void elementwise_grad_block(const C* dy, const C* x, const C* w,
                                                          C* gx, SplitMean<C> mc, C ic, C mg, C k,
                                                          std::int64_t lo, std::int64_t hi) {
#pragma omp simd
  for (std::int64_t j = lo; j < hi; ++j) {
    const C g = WithWeight ? dy[j] * w[j] : dy[j];
    gx[j] = ic * (g - mg) - ((x[j] - mc.hi) - mc.lo) * k;
  }
}

// One block of the parameters' sums: the first row of a parameter writes
// them (Add false), so that they need no zeroing pass; the later ones add.
template <bool Add, typename C>
[[gnu::always_inline]] inline void elementwise_param_block(const C* dy, const C* x, C* gw, C* gb,
                                                           SplitMean<C> mc, C ic, std::int64_t lo,
                                                           std::int64_t hi) {
  if (gw) {
#pragma omp simd
    for (std::int64_t j = lo; j < hi; ++j) {
      const C v = dy[j] * ((x[j] - mc.hi) - mc.lo) * ic;
      gw[j] = Add ? gw[j] + v : v;
    }
  }
  if (gb) {
#pragma omp simd
    for (std::int64_t j = lo; j < hi; ++j)
      gb[j] = Add ? gb[j] + dy[j] : dy[j];
  }
}

template <typename C>
[[gnu::always_inline]] inline void backward_apply_elementwise(const C* dy, const C* x, C* gx,
                                                              std::int64_t s, double m,
                                                              double invstd, const C* w,
                                                              double mean_g, double mean_gxhat,
                                                              C* gw, C* gb, bool first) {
  const SplitMean<C> mc(m);
  const C ic = static_cast<C>(invstd), mg = static_cast<C>(mean_g),
          k = static_cast<C>(invstd * invstd * mean_gxhat);
  for (std::int64_t lo = 0; lo < s; lo += kElementwiseBlock) {
    const std::int64_t hi = std::min(s, lo + kElementwiseBlock);
    if (gx && w) elementwise_grad_block<true>(dy, x, w, gx, mc, ic, mg, k, lo, hi);
    if (gx && !w) elementwise_grad_block<false>(dy, x, w, gx, mc, ic, mg, k, lo, hi);
    if (first) elementwise_param_block<false>(dy, x, gw, gb, mc, ic, lo, hi);
    if (!first) elementwise_param_block<true>(dy, x, gw, gb, mc, ic, lo, hi);
  }
}

}  // namespace

DTENSOR_SIMD_CLONES void row_relu_gate(const float* g, const float* y, float* out, std::int64_t s) {
#pragma omp simd
  for (std::int64_t j = 0; j < s; ++j)
    out[j] = y[j] <= 0 ? 0.0f : g[j];
}
DTENSOR_SIMD_CLONES void row_relu_gate(const double* g, const double* y, double* out,
                                       std::int64_t s) {
#pragma omp simd
  for (std::int64_t j = 0; j < s; ++j)
    out[j] = y[j] <= 0 ? 0.0 : g[j];
}
DTENSOR_SIMD_CLONES void row_moments(const float* x, std::int64_t s, double& mean, double& m2) {
  moments_of(x, s, mean, m2);
}
DTENSOR_SIMD_CLONES void row_moments(const double* x, std::int64_t s, double& mean, double& m2) {
  moments_of(x, s, mean, m2);
}

DTENSOR_SIMD_CLONES void row_affine(const float* x, float* y, std::int64_t s, const RowAffine& f) {
  affine(x, y, s, f);
}
DTENSOR_SIMD_CLONES void row_affine(const double* x, double* y, std::int64_t s,
                                    const RowAffine& f) {
  affine(x, y, s, f);
}

DTENSOR_SIMD_CLONES void row_affine_elementwise(const float* x, float* y, std::int64_t s, double m,
                                                double invstd, const float* w, const float* b,
                                                bool relu) {
  affine_elementwise(x, y, s, m, invstd, w, b, relu);
}
DTENSOR_SIMD_CLONES void row_affine_elementwise(const double* x, double* y, std::int64_t s,
                                                double m, double invstd, const double* w,
                                                const double* b, bool relu) {
  affine_elementwise(x, y, s, m, invstd, w, b, relu);
}

DTENSOR_SIMD_CLONES RowReduce row_backward_reduce(const float* dy, const float* x, std::int64_t s,
                                                  double w, const float* w_elem) {
  return backward_reduce(dy, x, s, w, w_elem);
}
DTENSOR_SIMD_CLONES RowReduce row_backward_reduce(const double* dy, const double* x, std::int64_t s,
                                                  double w, const double* w_elem) {
  return backward_reduce(dy, x, s, w, w_elem);
}

DTENSOR_SIMD_CLONES RowSums row_backward_apply(const float* dy, const float* x, float* gx,
                                               std::int64_t s, const RowBackward& f) {
  return backward_apply(dy, x, gx, s, f);
}
DTENSOR_SIMD_CLONES RowSums row_backward_apply(const double* dy, const double* x, double* gx,
                                               std::int64_t s, const RowBackward& f) {
  return backward_apply(dy, x, gx, s, f);
}

DTENSOR_SIMD_CLONES void row_backward_apply_elementwise(const float* dy, const float* x, float* gx,
                                                        std::int64_t s, double m, double invstd,
                                                        const float* w, double mean_g,
                                                        double mean_gxhat, float* gw, float* gb,
                                                        bool first) {
  backward_apply_elementwise(dy, x, gx, s, m, invstd, w, mean_g, mean_gxhat, gw, gb, first);
}
DTENSOR_SIMD_CLONES void row_backward_apply_elementwise(const double* dy, const double* x,
                                                        double* gx, std::int64_t s, double m,
                                                        double invstd, const double* w,
                                                        double mean_g, double mean_gxhat,
                                                        double* gw, double* gb, bool first) {
  backward_apply_elementwise(dy, x, gx, s, m, invstd, w, mean_g, mean_gxhat, gw, gb, first);
}

}  // namespace dtensor::cpu
