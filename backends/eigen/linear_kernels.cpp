// CPU kernels of linear (dtensor/ops/kernels/linear.h) with Eigen's matrix
// products: f32 and f64 in their own type, bf16 and f16 widened to f32 and
// the results rounded once. Tensors are row-major, so each is mapped as a
// row-major Eigen matrix: output = input weight^T (+ bias per row).
#include <Eigen/Core>

#include "dtensor/core/errors.h"
#include "dtensor/ops/kernels/linear.h"

namespace dtensor {
namespace {

template <typename T>
using Matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename T>
using CMap = Eigen::Map<const Matrix<T>>;
template <typename T>
using Map = Eigen::Map<Matrix<T>>;

DType work_dtype(DType dt) {
  return dt == DType::F64 ? DType::F64 : DType::F32;
}
Tensor in_work(const Tensor& t) {
  return t.dtype() == work_dtype(t.dtype()) ? t.contiguous() : t.to(work_dtype(t.dtype()));
}
// `out` itself when it is in the working type, else a working buffer that
// finish() copies back.
Tensor work_buffer(const Tensor& out) {
  return out.dtype() == work_dtype(out.dtype()) ? out : Tensor::empty(out.shape(), DType::F32);
}
void finish(const Tensor& out, const Tensor& buffer) {
  if (out.dtype() != buffer.dtype()) Tensor(out).copy_(buffer);
}

template <typename T>
CMap<T> as_matrix(const Tensor& t) {
  return CMap<T>(t.data<T>(), t.shape()[0], t.shape()[1]);
}
template <typename T>
Map<T> as_matrix_out(Tensor& t) {
  return Map<T>(t.data<T>(), t.shape()[0], t.shape()[1]);
}

template <typename T>
void forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) {
  Map<T> Y = as_matrix_out<T>(y);
  Y.noalias() = as_matrix<T>(x) * as_matrix<T>(w).transpose();
  if (b.defined())
    Y.rowwise() += Eigen::Map<const Eigen::Matrix<T, 1, Eigen::Dynamic>>(b.data<T>(), b.numel());
}

template <typename T>
void backward(const Tensor& gy, const Tensor& x, const Tensor& w, Tensor& gx, Tensor& gw,
              Tensor& gb) {
  const CMap<T> G = as_matrix<T>(gy);
  as_matrix_out<T>(gx).noalias() = G * as_matrix<T>(w);
  as_matrix_out<T>(gw).noalias() = G.transpose() * as_matrix<T>(x);
  Eigen::Map<Eigen::Matrix<T, 1, Eigen::Dynamic>>(gb.data<T>(), gb.numel()) = G.colwise().sum();
}

void run_linear(const kernels::LinearArgs& a) {
  const char* slot = kernels::kLinear.name;
  DTENSOR_CHECK_ARG(
      a.input.dim() == 2 && a.weight.dim() == 2 && a.input.shape()[1] == a.weight.shape()[1], slot,
      "internal: input {} and weight {} do not multiply", shape_str(a.input.shape()),
      shape_str(a.weight.shape()));
  const Tensor x = in_work(a.input), w = in_work(a.weight);
  const Tensor b = a.bias.defined() ? in_work(a.bias) : Tensor();
  Tensor y = work_buffer(a.output);
  if (y.dtype() == DType::F64)
    forward<double>(x, w, b, y);
  else
    forward<float>(x, w, b, y);
  finish(a.output, y);
}

void run_linear_backward(const kernels::LinearBackwardArgs& a) {
  const Tensor gy = in_work(a.grad_output), x = in_work(a.input), w = in_work(a.weight);
  Tensor gx = work_buffer(a.grad_input), gw = work_buffer(a.grad_weight),
         gb = work_buffer(a.grad_bias);
  if (gx.dtype() == DType::F64)
    backward<double>(gy, x, w, gx, gw, gb);
  else
    backward<float>(gy, x, w, gx, gw, gb);
  finish(a.grad_input, gx);
  finish(a.grad_weight, gw);
  finish(a.grad_bias, gb);
}

struct Registrar {
  Registrar() {
    for (DType dt : {DType::F32, DType::F64, DType::BF16, DType::F16}) {
      register_kernel(kernels::kLinear, DeviceType::CPU, dt,
                      KernelFunction<kernels::LinearArgs>(run_linear));
      register_kernel(kernels::kLinearBackward, DeviceType::CPU, dt,
                      KernelFunction<kernels::LinearBackwardArgs>(run_linear_backward));
    }
  }
};
const Registrar registrar;

}  // namespace
}  // namespace dtensor
