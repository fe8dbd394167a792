#include "backends/cuda/elementwise.h"

#include <vector>

#include "dtensor/core/errors.h"

namespace dtensor::cuda_backend {

StridedLayout make_layout(const Shape& shape, const Shape& dst_strides, const Shape& src_strides) {
  StridedLayout l;
  l.numel = shape_numel(shape);
  // Drop size-1 dims (their strides do not matter), then merge dim d into d+1
  // when both tensors step over d exactly as far as over all of d+1.
  std::vector<std::int64_t> sz, ds, ss;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    if (!sz.empty() && ds.back() == dst_strides[d] * shape[d] &&
        ss.back() == src_strides[d] * shape[d]) {
      sz.back() *= shape[d];
      ds.back() = dst_strides[d];
      ss.back() = src_strides[d];
      continue;
    }
    sz.push_back(shape[d]);
    ds.push_back(dst_strides[d]);
    ss.push_back(src_strides[d]);
  }
  DTENSOR_CHECK_ARG(static_cast<int>(sz.size()) <= kMaxKernelDims, "cuda",
                    "a strided copy of shape {} has {} non-mergeable dimensions (at most {})",
                    shape_str(shape), sz.size(), kMaxKernelDims);
  l.ndim = static_cast<int>(sz.size());
  for (int d = 0; d < l.ndim; ++d) {
    l.sizes[d] = sz[static_cast<std::size_t>(d)];
    l.dst_strides[d] = ds[static_cast<std::size_t>(d)];
    l.src_strides[d] = ss[static_cast<std::size_t>(d)];
  }
  return l;
}

Shape broadcast_strides(const Shape& from, const Shape& to) {
  DTENSOR_CHECK_ARG(from.size() <= to.size(), "cuda", "shape {} does not broadcast to {}",
                    shape_str(from), shape_str(to));
  const Shape dense = contiguous_strides(from);
  const std::size_t lead = to.size() - from.size();
  Shape strides(to.size(), 0);
  for (std::size_t d = 0; d < from.size(); ++d) {
    DTENSOR_CHECK_ARG(from[d] == to[lead + d] || from[d] == 1, "cuda",
                      "shape {} does not broadcast to {}", shape_str(from), shape_str(to));
    strides[lead + d] = from[d] == 1 ? 0 : dense[d];
  }
  return strides;
}

}  // namespace dtensor::cuda_backend
