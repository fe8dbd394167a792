#include "tools/reference/reference_view_ops.h"

#include <stdexcept>

namespace dtensor::reference {
namespace {

using Int = std::int64_t;
using Index = std::vector<Int>;

Index unravel(Int flat, const Shape& shape) {
  Index idx(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    idx[d] = flat % shape[d];
    flat /= shape[d];
  }
  return idx;
}

Int ravel(const Index& idx, const Shape& shape) {
  Int flat = 0;
  for (std::size_t d = 0; d < shape.size(); ++d)
    flat = flat * shape[d] + idx[d];
  return flat;
}

}  // namespace

Tensor ref_reshape(const Tensor& x, const Shape& shape) {
  if (shape_numel(shape) != x.numel())
    throw std::invalid_argument("ref_reshape: the shapes hold different numbers of elements");
  Tensor y = Tensor::empty(shape, DType::F64);
  for (Int i = 0; i < x.numel(); ++i)
    y.data<double>()[i] = x.item_flat(i);
  return y;
}

Tensor ref_permute(const Tensor& x, const std::vector<Int>& order) {
  Shape shape;
  for (Int d : order)
    shape.push_back(x.shape()[static_cast<std::size_t>(d)]);
  Tensor y = Tensor::empty(shape, DType::F64);
  for (Int i = 0; i < y.numel(); ++i) {
    const Index out = unravel(i, shape);
    Index in(out.size());
    for (std::size_t k = 0; k < order.size(); ++k)
      in[static_cast<std::size_t>(order[k])] = out[k];
    y.data<double>()[i] = x.item_flat(ravel(in, x.shape()));
  }
  return y;
}

Tensor ref_permute_grad_input(const Tensor& grad_output, const std::vector<Int>& order) {
  std::vector<Int> inverse(order.size());
  for (std::size_t k = 0; k < order.size(); ++k)
    inverse[static_cast<std::size_t>(order[k])] = static_cast<Int>(k);
  return ref_permute(grad_output, inverse);
}

Tensor ref_narrow(const Tensor& x, Int dim, Int start, Int length) {
  Shape shape = x.shape();
  shape[static_cast<std::size_t>(dim)] = length;
  Tensor y = Tensor::empty(shape, DType::F64);
  for (Int i = 0; i < y.numel(); ++i) {
    Index idx = unravel(i, shape);
    idx[static_cast<std::size_t>(dim)] += start;
    y.data<double>()[i] = x.item_flat(ravel(idx, x.shape()));
  }
  return y;
}

Tensor ref_narrow_grad_input(const Tensor& grad_output, const Shape& input_shape, Int dim,
                             Int start) {
  Tensor gx = Tensor::zeros(input_shape, DType::F64);
  for (Int i = 0; i < grad_output.numel(); ++i) {
    Index idx = unravel(i, grad_output.shape());
    idx[static_cast<std::size_t>(dim)] += start;
    gx.data<double>()[ravel(idx, input_shape)] = grad_output.item_flat(i);
  }
  return gx;
}

}  // namespace dtensor::reference
