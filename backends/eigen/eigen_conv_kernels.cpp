// f64 convolution on the CPU: im2col + one Eigen GEMM per (sample, group).
//
// oneDNN 2.6 has no f64 convolution, and f64 is what the tests and the
// dtensor-conv checker use for tight comparisons, so this path favours being
// plainly correct over being fast; it is still a GEMM, not a direct loop.
#include <algorithm>
#include <memory>
#include <vector>

#include <Eigen/Core>

#include "backends/eigen/im2col.h"
#include "dtensor/ops/local_conv.h"

namespace dtensor::eigen_backend {
namespace {

using RowMajor = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MapR = Eigen::Map<RowMajor>;
using ConstMapR = Eigen::Map<const RowMajor>;
// A block of columns of a row-major matrix whose rows are `stride` apart.
using BlockR = Eigen::Map<RowMajor, Eigen::Unaligned, Eigen::OuterStride<>>;
using ConstBlockR = Eigen::Map<const RowMajor, Eigen::Unaligned, Eigen::OuterStride<>>;

// Column-matrix entries per tile (8 MiB of doubles). Measured on the bench
// shapes (tests "[.bench]"): 2 MiB tiles make the GEMMs too short, 32 MiB ones
// fall out of cache; the untiled 3-D case needed a 110 MiB column matrix.
constexpr std::int64_t kColumnBudget = std::int64_t{1} << 20;

template <typename F>
void for_each_tile(const ConvGeometry& g, F&& f) {
  const std::int64_t segments = g.out[0] * g.out[1];
  const std::int64_t per_tile =
      std::max<std::int64_t>(1, kColumnBudget / (g.col_rows() * g.out[2]));
  for (std::int64_t b = 0; b < segments; b += per_tile)
    f(OutputTile{b, std::min(b + per_tile, segments)});
}

// The three passes on whole contiguous f64 tensors (the dense case).
struct EigenConv {
  static Tensor forward(const Tensor& x, const Tensor& w, const Tensor& b, const ConvParams& p) {
    const ConvGeometry g = ConvGeometry::make(x.shape(), w.shape(), p);
    Tensor y = Tensor::empty(conv_output_shape(x.shape(), w.shape(), p), DType::F64);
    const std::int64_t rows = g.col_rows(), osize = g.out_size();
    std::vector<double> col;
    const double* X = x.data<double>();
    const double* W = w.data<double>();
    double* Y = y.data<double>();
    for (std::int64_t n = 0; n < g.batch; ++n)
      for (std::int64_t grp = 0; grp < g.groups; ++grp) {
        const double* xg = X + (n * g.channels + grp * g.group_channels) * g.in_size();
        double* yg = Y + (n * g.out_channels + grp * g.group_out_channels) * osize;
        ConstMapR wg(W + grp * g.group_out_channels * rows, g.group_out_channels, rows);
        for_each_tile(g, [&](const OutputTile& tile) {
          const std::int64_t cols = tile.columns(g);
          col.resize(static_cast<std::size_t>(rows * cols));
          im2col(g, tile, xg, col.data());
          BlockR(yg + tile.begin * g.out[2], g.group_out_channels, cols,
                 Eigen::OuterStride<>(osize))
              .noalias() = wg * ConstMapR(col.data(), rows, cols);
        });
        if (b.defined()) {
          MapR ym(yg, g.group_out_channels, osize);
          const double* B = b.data<double>() + grp * g.group_out_channels;
          for (std::int64_t o = 0; o < g.group_out_channels; ++o)
            ym.row(o).array() += B[o];
        }
      }
    return y;
  }

  static Tensor backward_data(const Tensor& grad_out, const Tensor& w, const Shape& input_shape,
                              const ConvParams& p) {
    const ConvGeometry g = ConvGeometry::make(input_shape, w.shape(), p);
    Tensor gx = Tensor::zeros(input_shape, DType::F64);
    const std::int64_t rows = g.col_rows(), osize = g.out_size();
    std::vector<double> col;
    const double* GY = grad_out.data<double>();
    const double* W = w.data<double>();
    double* GX = gx.data<double>();
    for (std::int64_t n = 0; n < g.batch; ++n)
      for (std::int64_t grp = 0; grp < g.groups; ++grp) {
        const double* gyg = GY + (n * g.out_channels + grp * g.group_out_channels) * osize;
        double* gxg = GX + (n * g.channels + grp * g.group_channels) * g.in_size();
        ConstMapR wg(W + grp * g.group_out_channels * rows, g.group_out_channels, rows);
        for_each_tile(g, [&](const OutputTile& tile) {
          const std::int64_t cols = tile.columns(g);
          col.resize(static_cast<std::size_t>(rows * cols));
          MapR(col.data(), rows, cols).noalias() =
              wg.transpose() * ConstBlockR(gyg + tile.begin * g.out[2], g.group_out_channels, cols,
                                           Eigen::OuterStride<>(osize));
          col2im_add(g, tile, col.data(), gxg);
        });
      }
    return gx;
  }

  static ConvWeightGrads backward_weights(const Tensor& grad_out, const Tensor& x,
                                          const Shape& weight_shape, const ConvParams& p,
                                          bool want_bias) {
    const ConvGeometry g = ConvGeometry::make(x.shape(), weight_shape, p);
    ConvWeightGrads out;
    out.grad_weight = Tensor::zeros(weight_shape, DType::F64);
    const std::int64_t rows = g.col_rows(), osize = g.out_size();
    std::vector<double> col;
    const double* GY = grad_out.data<double>();
    const double* X = x.data<double>();
    double* GW = out.grad_weight.data<double>();
    for (std::int64_t n = 0; n < g.batch; ++n)
      for (std::int64_t grp = 0; grp < g.groups; ++grp) {
        const double* xg = X + (n * g.channels + grp * g.group_channels) * g.in_size();
        const double* gyg = GY + (n * g.out_channels + grp * g.group_out_channels) * osize;
        MapR gwg(GW + grp * g.group_out_channels * rows, g.group_out_channels, rows);
        for_each_tile(g, [&](const OutputTile& tile) {
          const std::int64_t cols = tile.columns(g);
          col.resize(static_cast<std::size_t>(rows * cols));
          im2col(g, tile, xg, col.data());
          gwg.noalias() += ConstBlockR(gyg + tile.begin * g.out[2], g.group_out_channels, cols,
                                       Eigen::OuterStride<>(osize)) *
                           ConstMapR(col.data(), rows, cols).transpose();
        });
      }
    if (want_bias) {
      out.grad_bias = Tensor::zeros({g.out_channels}, DType::F64);
      Eigen::Map<Eigen::VectorXd> gb(out.grad_bias.data<double>(), g.out_channels);
      for (std::int64_t n = 0; n < g.batch; ++n)
        gb += ConstMapR(GY + n * g.out_channels * osize, g.out_channels, osize).rowwise().sum();
    }
    return out;
  }
};

// The library is one shared object: this runs when it loads. It only fills
// the kernel table, so loading stays cheap and fork-safe.
const bool registered = [] {
  kernels::register_dense_conv_kernels(
      DeviceType::CPU, DType::F64,
      {&EigenConv::forward, &EigenConv::backward_data, &EigenConv::backward_weights});
  return true;
}();

}  // namespace
}  // namespace dtensor::eigen_backend
