// Shared bits of the tests/nn differential tests: seeded random choices,
// random placements, and an element-wise comparison (NaN equals NaN).
#pragma once

#include <fmt/format.h>
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "dtensor/core/tensor.h"
#include "dtensor/placement/placement.h"

namespace dtensor::nn_test {

using Rng = std::mt19937_64;
inline std::int64_t uni(Rng& rng, std::int64_t lo, std::int64_t hi) {
  return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
}

inline std::string mesh_str(const Shape& mesh) {
  std::string s;
  for (std::size_t k = 0; k < mesh.size(); ++k)
    s += (k ? "x" : "") + std::to_string(mesh[k]);
  return s;
}

/// Per mesh dim: Shard of a dim drawn from `dims` (weighted by `shard_pct`,
/// never one tensor dim twice unless `nested`), else Replicate, or Partial
/// with probability `partial_pct`.
inline Placements random_placements(Rng& rng, const Shape& mesh,
                                    const std::vector<std::int64_t>& dims, int shard_pct = 75,
                                    int partial_pct = 0, bool nested = false) {
  Placements out;
  std::vector<std::int64_t> used;
  for (std::size_t m = 0; m < mesh.size(); ++m) {
    const std::int64_t pick = uni(rng, 0, 99);
    if (pick < shard_pct && !dims.empty()) {
      const std::int64_t d =
          dims[static_cast<std::size_t>(uni(rng, 0, static_cast<std::int64_t>(dims.size()) - 1))];
      if (nested || std::find(used.begin(), used.end(), d) == used.end()) {
        used.push_back(d);
        out.push_back(Shard(d));
        continue;
      }
    }
    if (pick >= 100 - partial_pct)
      out.push_back(Partial());
    else
      out.push_back(Replicate());
  }
  return out;
}

inline void require_close(const Tensor& got, const Tensor& want, double tol, const char* what) {
  REQUIRE(shape_str(got.shape()) == shape_str(want.shape()));
  const Tensor g = got.to(DType::F64).contiguous(), w = want.to(DType::F64).contiguous();
  for (std::int64_t i = 0; i < g.numel(); ++i) {
    const double a = g.item_flat(i), b = w.item_flat(i);
    if (std::isnan(a) && std::isnan(b)) continue;
    if (a == b) continue;
    INFO(what << " element " << i << ": " << a << " vs " << b);
    REQUIRE(std::abs(a - b) <= tol * std::max(1.0, std::abs(b)));
  }
}

/// Row-major strides of `shape`.
inline Shape strides_of(const Shape& shape) {
  Shape s(shape.size(), 1);
  for (std::size_t i = shape.size(); i-- > 1;)
    s[i - 1] = s[i] * shape[i];
  return s;
}

}  // namespace dtensor::nn_test
