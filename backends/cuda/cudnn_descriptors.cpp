#include "backends/cuda/cudnn_descriptors.h"

#include <vector>

#include "backends/cuda/cuda_errors.h"
#include "dtensor/core/errors.h"

namespace dtensor::cuda_backend {
namespace {

std::vector<int> dims_of(const Shape& s) {
  return std::vector<int>(s.begin(), s.end());
}

}  // namespace

CudnnTypes cudnn_types(DType t) {
  switch (t) {
    case DType::F32:
      return {CUDNN_DATA_FLOAT, CUDNN_DATA_FLOAT, CUDNN_FMA_MATH};
    case DType::F64:
      return {CUDNN_DATA_DOUBLE, CUDNN_DATA_DOUBLE, CUDNN_DEFAULT_MATH};
    case DType::BF16:
      return {CUDNN_DATA_BFLOAT16, CUDNN_DATA_FLOAT, CUDNN_TENSOR_OP_MATH};
    case DType::F16:
      // Half data with f32 compute (cuDNN's "pseudo half" configuration): the
      // accumulation the CPU path (f32 kernels) has, so tolerances carry over.
      return {CUDNN_DATA_HALF, CUDNN_DATA_FLOAT, CUDNN_TENSOR_OP_MATH};
    case DType::I64:  // no integer convolution
      break;
  }
  throw NotSupported("cudnn", "unsupported dtype");
}

TensorDesc::TensorDesc(const Shape& shape, cudnnDataType_t type) {
  check_cudnn(cudnnCreateTensorDescriptor(&d_), "cudnnCreateTensorDescriptor");
  const std::vector<int> dims = dims_of(shape);
  std::vector<int> strides(dims.size());
  int s = 1;
  for (std::size_t i = dims.size(); i-- > 0;) {
    strides[i] = s;
    s *= dims[i];
  }
  check_cudnn(cudnnSetTensorNdDescriptor(d_, type, static_cast<int>(dims.size()), dims.data(),
                                         strides.data()),
              "cudnnSetTensorNdDescriptor " + shape_str(shape));
}
TensorDesc::~TensorDesc() {
  if (d_) cudnnDestroyTensorDescriptor(d_);
}

FilterDesc::FilterDesc(const Shape& shape, cudnnDataType_t type) {
  check_cudnn(cudnnCreateFilterDescriptor(&d_), "cudnnCreateFilterDescriptor");
  const std::vector<int> dims = dims_of(shape);
  check_cudnn(cudnnSetFilterNdDescriptor(d_, type, CUDNN_TENSOR_NCHW, static_cast<int>(dims.size()),
                                         dims.data()),
              "cudnnSetFilterNdDescriptor " + shape_str(shape));
}
FilterDesc::~FilterDesc() {
  if (d_) cudnnDestroyFilterDescriptor(d_);
}

ConvDesc::ConvDesc(const CudnnConvPlan& plan, const CudnnTypes& types) {
  check_cudnn(cudnnCreateConvolutionDescriptor(&d_), "cudnnCreateConvolutionDescriptor");
  // Cross-correlation: what PyTorch (and this library) call convolution.
  check_cudnn(cudnnSetConvolutionNdDescriptor(
                  d_, static_cast<int>(plan.pad.size()), plan.pad.data(), plan.stride.data(),
                  plan.dilation.data(), CUDNN_CROSS_CORRELATION, types.compute),
              "cudnnSetConvolutionNdDescriptor");
  check_cudnn(cudnnSetConvolutionGroupCount(d_, plan.groups), "cudnnSetConvolutionGroupCount");
  set_math(types.math);
}
ConvDesc::~ConvDesc() {
  if (d_) cudnnDestroyConvolutionDescriptor(d_);
}
void ConvDesc::set_math(cudnnMathType_t math) {
  check_cudnn(cudnnSetConvolutionMathType(d_, math), "cudnnSetConvolutionMathType");
}

Shape cudnn_output_shape(const TensorDesc& x, const FilterDesc& w, const ConvDesc& c, int rank) {
  std::vector<int> out(static_cast<std::size_t>(rank));
  check_cudnn(cudnnGetConvolutionNdForwardOutputDim(c.get(), x.get(), w.get(), rank, out.data()),
              "cudnnGetConvolutionNdForwardOutputDim");
  return Shape(out.begin(), out.end());
}

}  // namespace dtensor::cuda_backend
