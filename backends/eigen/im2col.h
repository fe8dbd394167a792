// im2col / col2im for the Eigen f64 convolution (oneDNN 2.6 has no f64).
//
// Every convolution is handled as 3-D: missing leading spatial dims become
// extent 1 with kernel 1, stride 1, dilation 1 and no padding. One sample's
// group of channels turns into a [Cg*K0*K1*K2, O0*O1*O2] row-major matrix whose
// column j holds the inputs output j reads (zeros for padding), so a convolution
// is one GEMM per (sample, group).
#pragma once

#include <array>
#include <cstdint>

#include "dtensor/core/shape.h"
#include "dtensor/ops/conv_params.h"

namespace dtensor::eigen_backend {

struct ConvGeometry {
  std::int64_t batch = 0, channels = 0, out_channels = 0, groups = 1;
  std::int64_t group_channels = 0, group_out_channels = 0;  // Cg, OCg
  std::array<std::int64_t, 3> in{1, 1, 1}, kernel{1, 1, 1}, out{1, 1, 1};
  std::array<std::int64_t, 3> stride{1, 1, 1}, dilation{1, 1, 1}, pad_left{0, 0, 0};

  /// From validated shapes and expanded params.
  static ConvGeometry make(const Shape& input, const Shape& weight, const ConvParams& p);

  std::int64_t in_size() const { return in[0] * in[1] * in[2]; }
  std::int64_t out_size() const { return out[0] * out[1] * out[2]; }
  std::int64_t kernel_size() const { return kernel[0] * kernel[1] * kernel[2]; }
  /// Rows of the column matrix: Cg * K0*K1*K2.
  std::int64_t col_rows() const { return group_channels * kernel_size(); }
};

/// A tile of the output positions: the (o0, o1) "segments" [begin, end), each
/// one row of O2 outputs. Tiling keeps the column matrix cache-sized instead of
/// Cg*K x O (hundreds of MB for a 3-D volume).
struct OutputTile {
  std::int64_t begin = 0, end = 0;
  std::int64_t columns(const ConvGeometry& g) const { return (end - begin) * g.out[2]; }
};

/// x: one sample's Cg channels, [Cg, I0, I1, I2] dense.
/// col: [col_rows, tile.columns] row-major; column j holds what output
/// (tile.begin * O2 + j) reads.
void im2col(const ConvGeometry& g, const OutputTile& tile, const double* x, double* col);

/// The adjoint of im2col: x += scatter(col). Overlapping taps accumulate.
void col2im_add(const ConvGeometry& g, const OutputTile& tile, const double* col, double* x);

}  // namespace dtensor::eigen_backend
