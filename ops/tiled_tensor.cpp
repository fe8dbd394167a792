#include "dtensor/ops/tiled_tensor.h"

#include <algorithm>

#include "dtensor/core/errors.h"

namespace dtensor {
namespace {

constexpr const char* kComponent = "ops";

// The region of `t` (logical shape) that a tile at `offset` with `sizes` covers.
Tensor region(Tensor t, const Shape& offset, const Shape& sizes) {
  for (std::size_t d = 0; d < sizes.size(); ++d)
    if (offset[d] != 0 || sizes[d] != t.size(static_cast<std::int64_t>(d)))
      t = t.narrow(static_cast<std::int64_t>(d), offset[d], sizes[d]);
  return t;
}

bool boxes_overlap(const Shape& oa, const Shape& sa, const Shape& ob, const Shape& sb) {
  for (std::size_t d = 0; d < oa.size(); ++d)
    if (oa[d] + sa[d] <= ob[d] || ob[d] + sb[d] <= oa[d]) return false;
  return true;
}

}  // namespace

TiledTensor::TiledTensor(Shape shape, DType dtype, Device device)
    : shape_(std::move(shape)), dtype_(dtype), device_(device) {
  for (auto s : shape_)
    DTENSOR_CHECK_ARG(s >= 0, kComponent, "TiledTensor: negative extent in shape {}",
                      shape_str(shape_));
}

TiledTensor TiledTensor::whole(const Tensor& t) {
  TiledTensor tt(t.shape(), t.dtype(), t.device());
  tt.add(t, Shape(t.shape().size(), 0));
  return tt;
}

void TiledTensor::add(const Tensor& data, const Shape& offset) {
  check_arg(data.defined(), kComponent, "TiledTensor::add: undefined tile");
  DTENSOR_CHECK_ARG(data.dtype() == dtype_ && data.device() == device_, kComponent,
                    "TiledTensor::add: tile {} but the tensor is {} on {}", data.str(),
                    dtype_name(dtype_), device_.str());
  DTENSOR_CHECK_ARG(data.shape().size() == shape_.size() && offset.size() == shape_.size(),
                    kComponent,
                    "TiledTensor::add: tile of rank {} at offset {} in a tensor of rank {}",
                    data.shape().size(), shape_str(offset), shape_.size());
  for (std::size_t d = 0; d < shape_.size(); ++d)
    DTENSOR_CHECK_ARG(offset[d] >= 0 && offset[d] + data.shape()[d] <= shape_[d], kComponent,
                      "TiledTensor::add: tile {} at offset {} reaches outside {}",
                      shape_str(data.shape()), shape_str(offset), shape_str(shape_));
  if (data.numel() == 0) return;
  for (const auto& t : tiles_)
    DTENSOR_CHECK_ARG(!boxes_overlap(t.offset, t.data.shape(), offset, data.shape()), kComponent,
                      "TiledTensor::add: tile {} at offset {} overlaps the tile {} at {}",
                      shape_str(data.shape()), shape_str(offset), shape_str(t.data.shape()),
                      shape_str(t.offset));
  tiles_.push_back({data, offset});
}

TiledTensor TiledTensor::narrow(std::int64_t dim, std::int64_t start, std::int64_t length) const {
  const auto d = static_cast<std::size_t>(dim);
  DTENSOR_CHECK_ARG(
      dim >= 0 && d < shape_.size() && start >= 0 && length >= 0 && start + length <= shape_[d],
      kComponent, "TiledTensor::narrow: [{}, {}) along dim {} of {}", start, start + length, dim,
      shape_str(shape_));
  Shape shape = shape_;
  shape[d] = length;
  TiledTensor out(shape, dtype_, device_);
  for (const auto& t : tiles_) {
    const std::int64_t lo = std::max(start, t.offset[d]);
    const std::int64_t hi = std::min(start + length, t.offset[d] + t.data.size(dim));
    if (hi <= lo) continue;
    Shape offset = t.offset;
    offset[d] = lo - start;
    out.tiles_.push_back({t.data.narrow(dim, lo - t.offset[d], hi - lo), offset});
  }
  return out;
}

bool TiledTensor::complete() const {
  std::int64_t covered = 0;
  for (const auto& t : tiles_)
    covered += t.data.numel();
  return covered == numel();  // tiles lie inside and never overlap
}

bool TiledTensor::is_whole() const {
  return tiles_.size() == 1 && tiles_[0].data.shape() == shape_;
}

Tensor TiledTensor::assemble() const {
  DTENSOR_CHECK_ARG(complete(), kComponent, "TiledTensor::assemble: the tiles do not cover {}",
                    shape_str(shape_));
  if (is_whole()) return tiles_[0].data;
  Tensor out = Tensor::empty(shape_, dtype_, device_);
  copy_to(out);
  return out;
}

void TiledTensor::copy_to(const Tensor& dst) const {
  DTENSOR_CHECK_ARG(dst.shape() == shape_, kComponent,
                    "TiledTensor::copy_to: destination {} but the shape is {}",
                    shape_str(dst.shape()), shape_str(shape_));
  for (const auto& t : tiles_)
    region(dst, t.offset, t.data.shape()).copy_(t.data);
}

void TiledTensor::scatter(const Tensor& full) const {
  DTENSOR_CHECK_ARG(full.shape() == shape_, kComponent,
                    "TiledTensor::scatter: source {} but the shape is {}", shape_str(full.shape()),
                    shape_str(shape_));
  for (const auto& t : tiles_) {
    Tensor d = t.data;  // a view: writing it writes the tile
    d.copy_(region(full, t.offset, t.data.shape()));
  }
}

void TiledTensor::add_(const Tensor& full) const {
  DTENSOR_CHECK_ARG(full.shape() == shape_, kComponent,
                    "TiledTensor::add_: source {} but the shape is {}", shape_str(full.shape()),
                    shape_str(shape_));
  for (const auto& t : tiles_) {
    Tensor d = t.data;
    d.add_(region(full, t.offset, t.data.shape()));
  }
}

void TiledTensor::zero_() const {
  for (const auto& t : tiles_) {
    Tensor d = t.data;
    d.zero_();
  }
}

}  // namespace dtensor
