// A strided, typed view of a Storage: the local tensor of every DTensor.
//
// Views (narrow, view) share storage; copy_ and contiguous() move data. Only
// what the library and its users need is here: element-wise maths lives in
// ops/, local convolutions in backends/.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>

#include "dtensor/core/dtype.h"
#include "dtensor/core/errors.h"
#include "dtensor/core/shape.h"
#include "dtensor/core/storage.h"

namespace dtensor {

class Tensor {
 public:
  /// An undefined tensor (defined() == false): "no tensor", e.g. a missing bias.
  Tensor() = default;

  static Tensor empty(const Shape& shape, DType dtype, Device device = Device::cpu());
  static Tensor zeros(const Shape& shape, DType dtype, Device device = Device::cpu());
  static Tensor full(const Shape& shape, double value, DType dtype, Device device = Device::cpu());
  /// Uniform values in [-1, 1). Element i (row-major) depends only on (seed, i),
  /// so every rank generates the same tensor, and `rand_slice` any part of it.
  static Tensor rand(const Shape& shape, DType dtype, std::uint64_t seed);
  /// The sub-box [offset, offset + shape) of rand(global_shape, dtype, seed),
  /// generated without materialising the whole.
  static Tensor rand_slice(const Shape& global_shape, const Shape& offset, const Shape& shape,
                           DType dtype, std::uint64_t seed);

  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return dtype_; }
  Device device() const;
  const Shape& shape() const { return layout_ ? layout_->shape : no_extents(); }
  const Shape& strides() const { return layout_ ? layout_->strides : no_extents(); }
  std::int64_t dim() const { return static_cast<std::int64_t>(shape().size()); }
  std::int64_t size(std::int64_t d) const;
  std::int64_t stride(std::int64_t d) const;
  std::int64_t numel() const { return shape_numel(shape()); }
  std::size_t nbytes() const { return static_cast<std::size_t>(numel()) * dtype_size(dtype_); }
  std::int64_t storage_offset() const { return offset_; }
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  bool is_contiguous() const;
  /// True when both views read or write the same storage.
  bool shares_storage_with(const Tensor& other) const {
    return storage_ && storage_ == other.storage_;
  }

  void* data_ptr() const;
  template <typename T>
  T* data() const {
    DTENSOR_CHECK_ARG(dtype_of<T>::value == dtype_, "tensor", "data<{}>() on a {} tensor",
                      dtype_name(dtype_of<T>::value), dtype_name(dtype_));
    return static_cast<T*>(data_ptr());
  }

  /// View of [start, start + length) along `dim` (negative dims count from the end).
  Tensor narrow(std::int64_t dim, std::int64_t start, std::int64_t length) const;
  /// View with a new shape; the tensor must be contiguous.
  Tensor view(const Shape& shape) const;
  /// This tensor when already contiguous, else a dense copy.
  Tensor contiguous() const;
  /// A dense copy that shares nothing with this tensor.
  Tensor clone() const;
  /// A dense copy converted to `dtype`.
  Tensor to(DType dtype) const;
  /// This tensor on `device`: itself when already there, else a dense copy
  /// (host <-> CUDA copies need a build with CUDA; NotSupported otherwise).
  Tensor to(Device device) const;

  /// Copies `src` (same shape; any strides; any dtype, converted) into this view.
  Tensor& copy_(const Tensor& src);
  Tensor& fill_(double value);
  Tensor& zero_() { return fill_(0.0); }
  /// this += src, element-wise (same shape and dtype).
  Tensor& add_(const Tensor& src);

  /// One element as double (for tests and printing; a device tensor's element
  /// is copied to the host).
  double item(std::initializer_list<std::int64_t> index) const;
  double item_flat(std::int64_t flat_index) const;

  std::string str() const;  // "Tensor(f32, [2, 3], cpu)"

 private:
  Tensor(std::shared_ptr<Storage> storage, std::int64_t offset, Shape shape, Shape strides,
         DType dtype);
  double device_element(std::int64_t storage_index) const;
  // The extents and strides of a view never change once made, so copies of
  // a Tensor share them: copying one (tensors are passed around by value in
  // every call's arguments) allocates nothing.
  struct Layout {
    Shape shape, strides;
  };
  static const Shape& no_extents();
  std::shared_ptr<Storage> storage_;
  std::int64_t offset_ = 0;
  std::shared_ptr<const Layout> layout_;
  DType dtype_ = DType::F32;
};

/// Largest |a - b| over all elements, computed in f64 (shapes must match).
double max_abs_diff(const Tensor& a, const Tensor& b);
/// Largest |a| over all elements.
double max_abs(const Tensor& a);

}  // namespace dtensor
