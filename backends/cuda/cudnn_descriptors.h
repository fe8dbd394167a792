// cuDNN descriptors as RAII objects, and the mapping of the library's dtypes to
// cuDNN's data, compute and math types.
#pragma once

#include <cudnn.h>

#include "backends/cuda/cudnn_plan.h"
#include "dtensor/core/dtype.h"
#include "dtensor/core/shape.h"

namespace dtensor::cuda_backend {

struct CudnnTypes {
  cudnnDataType_t data;
  /// Accumulation: f32 for f32/bf16/f16 (neither 16-bit type has an accumulate type of its own),
  /// f64 for f64.
  cudnnDataType_t compute;
  /// f32 uses plain FMA math: TF32 tensor cores would round operands to 10
  /// mantissa bits and break the f32 tolerance the tests hold every backend to.
  cudnnMathType_t math;
};
CudnnTypes cudnn_types(DType t);

class TensorDesc {
 public:
  /// A dense NC(D)HW tensor (rank 4 or 5).
  TensorDesc(const Shape& shape, cudnnDataType_t type);
  ~TensorDesc();
  TensorDesc(const TensorDesc&) = delete;
  TensorDesc& operator=(const TensorDesc&) = delete;
  cudnnTensorDescriptor_t get() const { return d_; }

 private:
  cudnnTensorDescriptor_t d_ = nullptr;
};

class FilterDesc {
 public:
  FilterDesc(const Shape& shape, cudnnDataType_t type);
  ~FilterDesc();
  FilterDesc(const FilterDesc&) = delete;
  FilterDesc& operator=(const FilterDesc&) = delete;
  cudnnFilterDescriptor_t get() const { return d_; }

 private:
  cudnnFilterDescriptor_t d_ = nullptr;
};

class ConvDesc {
 public:
  ConvDesc(const CudnnConvPlan& plan, const CudnnTypes& types);
  ~ConvDesc();
  ConvDesc(const ConvDesc&) = delete;
  ConvDesc& operator=(const ConvDesc&) = delete;
  cudnnConvolutionDescriptor_t get() const { return d_; }
  void set_math(cudnnMathType_t math);

 private:
  cudnnConvolutionDescriptor_t d_ = nullptr;
};

/// The output shape cuDNN computes for the plan's descriptors (checked against
/// the plan's own y before any kernel runs).
Shape cudnn_output_shape(const TensorDesc& x, const FilterDesc& w, const ConvDesc& c, int rank);

}  // namespace dtensor::cuda_backend
