#include "ops/window/held_padding.h"

#include "dtensor/core/errors.h"

namespace dtensor::detail {
namespace {

// Padding row `i` (1-based, counted outwards) of one side and the row it is
// copied from, along `dim` of `t`: both one row thick.
struct RowPair {
  Tensor padding, source;
};

RowPair row_pair(const Tensor& t, std::int64_t dim, std::int64_t left, std::int64_t length,
                 bool right_side, std::int64_t i, Boundary boundary) {
  const bool reflect = boundary == Boundary::Reflect;
  if (!right_side) return {t.narrow(dim, left - i, 1), t.narrow(dim, reflect ? left + i : left, 1)};
  const std::int64_t last = left + length - 1;
  return {t.narrow(dim, last + i, 1), t.narrow(dim, reflect ? last - i : last, 1)};
}

void check_boundary(Boundary boundary) {
  DTENSOR_CHECK_ARG(boundary == Boundary::Reflect || boundary == Boundary::Replicate,
                    "held_padding", "boundary: {} padding is not filled from held rows",
                    boundary_name(boundary));
}

}  // namespace

Tensor unpadded_view(const Tensor& padded, const ConvParams::Padding& pads) {
  Tensor v = padded;
  for (std::size_t d = 0; d < pads.size(); ++d) {
    const auto dim = static_cast<std::int64_t>(d) + 2;
    v = v.narrow(dim, pads[d].first, v.size(dim) - pads[d].first - pads[d].second);
  }
  return v;
}

void fill_padding(const Tensor& padded, Boundary boundary, const ConvParams::Padding& pads) {
  check_boundary(boundary);
  for (std::size_t d = 0; d < pads.size(); ++d) {
    const auto dim = static_cast<std::int64_t>(d) + 2;
    const auto [left, right] = pads[d];
    const std::int64_t length = padded.size(dim) - left - right;
    for (int side = 0; side < 2; ++side)
      for (std::int64_t i = 1; i <= (side ? right : left); ++i) {
        RowPair r = row_pair(padded, dim, left, length, side == 1, i, boundary);
        r.padding.copy_(r.source);
      }
  }
}

void fold_padding(const Tensor& grad, Boundary boundary, const ConvParams::Padding& pads) {
  check_boundary(boundary);
  for (std::size_t d = pads.size(); d-- > 0;) {
    const auto dim = static_cast<std::int64_t>(d) + 2;
    const auto [left, right] = pads[d];
    const std::int64_t length = grad.size(dim) - left - right;
    for (int side = 0; side < 2; ++side)
      for (std::int64_t i = 1; i <= (side ? right : left); ++i) {
        RowPair r = row_pair(grad, dim, left, length, side == 1, i, boundary);
        r.source.add_(r.padding);
      }
  }
}

}  // namespace dtensor::detail
