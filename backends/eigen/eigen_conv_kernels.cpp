// f64 convolution on the CPU: im2col + one Eigen GEMM per (sample, group).
//
// oneDNN 2.6 has no f64 convolution, and f64 is what the tests and the
// dtensor-conv checker use for tight comparisons, so this path favours being
// plainly correct over being fast; it is still a GEMM, not a direct loop.
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

class EigenConvKernels final : public LocalConvKernels {
 public:
  std::string name() const override { return "eigen"; }

 protected:
  Tensor forward_impl(const Tensor& x, const Tensor& w, const Tensor& b,
                      const ConvParams& p) const override {
    const ConvGeometry g = ConvGeometry::make(x.shape(), w.shape(), p);
    Shape out_shape{g.batch, g.out_channels};
    for (std::size_t i = 0; i < p.stride.size(); ++i)
      out_shape.push_back(g.out[3 - p.stride.size() + i]);
    Tensor y = Tensor::empty(out_shape, DType::F64);
    const std::int64_t rows = g.col_rows(), osize = g.out_size();
    std::vector<double> col(static_cast<std::size_t>(rows * osize));
    const double* X = x.data<double>();
    const double* W = w.data<double>();
    double* Y = y.data<double>();
    for (std::int64_t n = 0; n < g.batch; ++n)
      for (std::int64_t grp = 0; grp < g.groups; ++grp) {
        im2col(g, X + (n * g.channels + grp * g.group_channels) * g.in_size(), col.data());
        ConstMapR wg(W + grp * g.group_out_channels * rows, g.group_out_channels, rows);
        ConstMapR cm(col.data(), rows, osize);
        MapR yg(Y + (n * g.out_channels + grp * g.group_out_channels) * osize, g.group_out_channels,
                osize);
        yg.noalias() = wg * cm;
        if (b.defined()) {
          const double* B = b.data<double>() + grp * g.group_out_channels;
          for (std::int64_t o = 0; o < g.group_out_channels; ++o)
            yg.row(o).array() += B[o];
        }
      }
    return y;
  }

  Tensor backward_data_impl(const Tensor& grad_out, const Tensor& w, const Shape& input_shape,
                            const ConvParams& p) const override {
    const ConvGeometry g = ConvGeometry::make(input_shape, w.shape(), p);
    Tensor gx = Tensor::zeros(input_shape, DType::F64);
    const std::int64_t rows = g.col_rows(), osize = g.out_size();
    std::vector<double> col(static_cast<std::size_t>(rows * osize));
    const double* GY = grad_out.data<double>();
    const double* W = w.data<double>();
    double* GX = gx.data<double>();
    for (std::int64_t n = 0; n < g.batch; ++n)
      for (std::int64_t grp = 0; grp < g.groups; ++grp) {
        ConstMapR wg(W + grp * g.group_out_channels * rows, g.group_out_channels, rows);
        ConstMapR gyg(GY + (n * g.out_channels + grp * g.group_out_channels) * osize,
                      g.group_out_channels, osize);
        MapR cm(col.data(), rows, osize);
        cm.noalias() = wg.transpose() * gyg;
        col2im_add(g, col.data(), GX + (n * g.channels + grp * g.group_channels) * g.in_size());
      }
    return gx;
  }

  ConvWeightGrads backward_weights_impl(const Tensor& grad_out, const Tensor& x,
                                        const Shape& weight_shape, const ConvParams& p,
                                        bool want_bias) const override {
    const ConvGeometry g = ConvGeometry::make(x.shape(), weight_shape, p);
    ConvWeightGrads out;
    out.grad_weight = Tensor::zeros(weight_shape, DType::F64);
    const std::int64_t rows = g.col_rows(), osize = g.out_size();
    std::vector<double> col(static_cast<std::size_t>(rows * osize));
    const double* GY = grad_out.data<double>();
    const double* X = x.data<double>();
    double* GW = out.grad_weight.data<double>();
    for (std::int64_t n = 0; n < g.batch; ++n)
      for (std::int64_t grp = 0; grp < g.groups; ++grp) {
        im2col(g, X + (n * g.channels + grp * g.group_channels) * g.in_size(), col.data());
        ConstMapR gyg(GY + (n * g.out_channels + grp * g.group_out_channels) * osize,
                      g.group_out_channels, osize);
        ConstMapR cm(col.data(), rows, osize);
        MapR gwg(GW + grp * g.group_out_channels * rows, g.group_out_channels, rows);
        gwg.noalias() += gyg * cm.transpose();
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

// The library is one shared object: this runs when it loads. It only builds a
// stateless object, so loading stays cheap and fork-safe.
const bool registered = [] {
  register_local_conv_kernels(DeviceType::CPU, DType::F64, std::make_shared<EigenConvKernels>());
  return true;
}();

}  // namespace
}  // namespace dtensor::eigen_backend
