// Shapes and the small arithmetic on them that every layer uses.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dtensor {

using Shape = std::vector<std::int64_t>;

/// Product of the extents (1 for a 0-d shape).
std::int64_t shape_numel(const Shape& s);
/// Row-major (C order) strides of a dense tensor of shape `s`, in elements.
Shape contiguous_strides(const Shape& s);
/// "[2, 3, 4]".
std::string shape_str(const Shape& s);
/// Normalises a possibly negative dim against `ndim`; throws InvalidArgument naming `what`.
std::int64_t normalize_dim(std::int64_t dim, std::int64_t ndim, const char* what);
/// Parses "2,3,4" (or "2x3x4" with sep 'x') into a shape; throws InvalidArgument naming `what`.
Shape parse_int_list(const std::string& text, const char* what, char sep = ',');

}  // namespace dtensor
