// Padding filled from held rows and its gradient folded back
// (ops/window/held_padding.h), against naive index maps: every cell of the
// padded tensor must be the input cell PyTorch's reflect / replicate padding
// reads (per dim: reflect -i -> i, L-1+i -> L-1-i; replicate clamps), and
// the folded gradient must be every padded cell's gradient summed onto the
// cell it read. Integer-valued data, so the sums are exact in any order.
#include <catch2/catch.hpp>

#include <random>
#include <vector>

#include "ops/window/held_padding.h"

using namespace dtensor;

namespace {

std::int64_t source(std::int64_t i, std::int64_t length, Boundary boundary) {
  if (i >= 0 && i < length) return i;
  if (boundary == Boundary::Replicate) return i < 0 ? 0 : length - 1;
  return i < 0 ? -i : 2 * (length - 1) - i;  // reflect
}

// Row-major strides of `shape`.
Shape strides_of(const Shape& shape) {
  Shape s(shape.size(), 1);
  for (std::size_t d = shape.size(); d-- > 1;)
    s[d - 1] = s[d] * shape[d];
  return s;
}

Tensor integers(const Shape& shape, std::mt19937_64& rng) {
  Tensor t = Tensor::empty(shape, DType::F64);
  std::uniform_int_distribution<int> value(-50, 50);
  for (std::int64_t i = 0; i < t.numel(); ++i)
    t.data<double>()[i] = value(rng);
  return t;
}

}  // namespace

TEST_CASE("held padding: reflect and replicate fill as PyTorch pads, and fold is their adjoint",
          "[halo][halo_chain]") {
  std::mt19937_64 rng(41);
  auto uni = [&](std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
  };
  for (int trial = 0; trial < 300; ++trial) {
    const Boundary boundary = uni(0, 1) ? Boundary::Reflect : Boundary::Replicate;
    const std::int64_t spatial = uni(1, 3);
    Shape shape{uni(1, 2), uni(1, 3)};
    ConvParams::Padding pads;
    for (std::int64_t d = 0; d < spatial; ++d) {
      const std::int64_t length = uni(1, 6);
      shape.push_back(length);
      // Reflect reads rows 1..pad: shorter than the dim.
      const std::int64_t most = boundary == Boundary::Reflect ? length - 1 : 4;
      pads.emplace_back(uni(0, most), uni(0, most));
    }
    INFO("trial " << trial << " shape " << shape_str(shape));
    Shape padded_shape = shape;
    for (std::int64_t d = 0; d < spatial; ++d)
      padded_shape[static_cast<std::size_t>(d) + 2] +=
          pads[static_cast<std::size_t>(d)].first + pads[static_cast<std::size_t>(d)].second;
    const Tensor x = integers(shape, rng);
    Tensor padded = Tensor::full(padded_shape, 1e9, DType::F64);  // a cell left unfilled shows
    detail::unpadded_view(padded, pads).copy_(x);
    detail::fill_padding(padded, boundary, pads);
    const Tensor g = integers(padded_shape, rng);
    Tensor folded = g.clone();
    detail::fold_padding(folded, boundary, pads);
    const Tensor grad_x = detail::unpadded_view(folded, pads).contiguous();

    const Shape ps = strides_of(padded_shape), xs = strides_of(shape);
    std::vector<double> expected_grad(static_cast<std::size_t>(x.numel()), 0.0);
    for (std::int64_t flat = 0; flat < padded.numel(); ++flat) {
      std::int64_t from = 0, rest = flat;
      for (std::size_t d = 0; d < padded_shape.size(); ++d) {
        std::int64_t i = rest / ps[d];
        rest %= ps[d];
        if (d >= 2) i = source(i - pads[d - 2].first, shape[d], boundary);
        from += i * xs[d];
      }
      CHECK(padded.data<double>()[flat] == x.data<double>()[from]);
      expected_grad[static_cast<std::size_t>(from)] += g.data<double>()[flat];
    }
    for (std::int64_t i = 0; i < x.numel(); ++i)
      CHECK(grad_x.data<double>()[i] == expected_grad[static_cast<std::size_t>(i)]);
  }
}
