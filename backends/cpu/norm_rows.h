// The normalisations' arithmetic on one row of s contiguous elements (one
// (sample, channel) of a [n, c, spatial...] block), in the row's compute type
// C (float for f32, bf16 and f16 data; double for f64). norm_kernels.cpp
// walks the rows and merges their results into statistics.
#pragma once

#include <cstdint>

namespace dtensor::cpu {

/// Per-channel scale: y = (x - m) * a + b, then max(y, 0) when relu.
struct RowAffine {
  double m = 0, a = 1, b = 0;
  bool relu = false;
};

/// The row's mean and sum of squared deviations from it (two passes).
void row_moments(const float* x, std::int64_t s, double& mean, double& m2);
void row_moments(const double* x, std::int64_t s, double& mean, double& m2);

void row_affine(const float* x, float* y, std::int64_t s, const RowAffine& f);
void row_affine(const double* x, double* y, std::int64_t s, const RowAffine& f);

/// Per-element weight and bias (either may be null): y = (x - m) * invstd * w + b.
void row_affine_elementwise(const float* x, float* y, std::int64_t s, double m, double invstd,
                            const float* w, const float* b, bool relu);
void row_affine_elementwise(const double* x, double* y, std::int64_t s, double m, double invstd,
                            const double* w, const double* b, bool relu);

/// A fused relu's gradient on a row: out = y <= 0 ? 0 : g (y the relu's
/// output; at NaN the gradient passes, as PyTorch's threshold_backward).
void row_relu_gate(const float* g, const float* y, float* out, std::int64_t s);
void row_relu_gate(const double* g, const double* y, double* out, std::int64_t s);

/// The backward's first pass on a row, g = dy * (w_elem ? w_elem[j] : w):
/// the row's mean and M2 of x, G = sum(g), H = sum(g * (x - mean)).
struct RowReduce {
  double mean = 0, m2 = 0, g = 0, h = 0;
};
RowReduce row_backward_reduce(const float* dy, const float* x, std::int64_t s, double w,
                              const float* w_elem);
RowReduce row_backward_reduce(const double* dy, const double* x, std::int64_t s, double w,
                              const double* w_elem);

/// The backward's second pass on a row with per-channel weight:
///   gx = dy * a + (x - m) * b + c      (when gx is not null)
/// and returns sum(dy) and sum(dy * (x - m)).
struct RowBackward {
  double m = 0, a = 0, b = 0, c = 0;
};
struct RowSums {
  double dy = 0, dy_xc = 0;
};
RowSums row_backward_apply(const float* dy, const float* x, float* gx, std::int64_t s,
                           const RowBackward& f);
RowSums row_backward_apply(const double* dy, const double* x, double* gx, std::int64_t s,
                           const RowBackward& f);

/// The same with per-element weight (layer_norm): g = dy * w[j] (w null: 1),
///   gx = invstd * (g - mean_g) - (x - m) * invstd^2 * mean_gxhat,
/// and per element gw[j] += dy * (x - m) * invstd, gb[j] += dy (either null:
/// skipped; `first`: = instead of +=, for a parameter's first row). The sums
/// are in the row's compute type, as PyTorch's: each element's sum has only
/// as many terms as there are samples.
void row_backward_apply_elementwise(const float* dy, const float* x, float* gx, std::int64_t s,
                                    double m, double invstd, const float* w, double mean_g,
                                    double mean_gxhat, float* gw, float* gb, bool first);
void row_backward_apply_elementwise(const double* dy, const double* x, double* gx, std::int64_t s,
                                    double m, double invstd, const double* w, double mean_g,
                                    double mean_gxhat, double* gw, double* gb, bool first);

}  // namespace dtensor::cpu
