// Test-side oracle for DTensor layouts, written independently of the library:
// where each rank's shard lies (torch.chunk by enumeration, nested in mesh-dim
// order) and what a rank holds for Partial(sum) placements. Values are small
// integers in f64/f32, so sums are exact whatever the reduction order.
#pragma once

#include <vector>

#include "dtensor/core/tensor.h"
#include "dtensor/placement/placement.h"

namespace dtensor::testing {

/// torch.chunk: pieces of ceil(L/P) until the tensor runs out; later ranks get nothing.
inline std::pair<std::int64_t, std::int64_t> oracle_chunk(std::int64_t L, std::int64_t P,
                                                          std::int64_t r) {
  const std::int64_t c = (L + P - 1) / P;
  std::int64_t start = 0;
  for (std::int64_t q = 0; q < r; ++q) start += std::max<std::int64_t>(0, std::min(c, L - start));
  return {start, std::max<std::int64_t>(0, std::min(c, L - start))};
}

/// A tensor of integers in [-50, 50) (exact in any float type).
inline Tensor integer_tensor(const Shape& shape, DType dtype, std::uint64_t seed) {
  Tensor r = Tensor::rand(shape, DType::F64, seed);
  Tensor out = Tensor::empty(shape, DType::F64);
  for (std::int64_t i = 0; i < r.numel(); ++i)
    out.data<double>()[i] = std::floor(r.data<double>()[i] * 50.0);
  return out.to(dtype);
}

/// What the rank at `coord` holds for `placements` of the global tensor G.
/// For a Partial(sum) mesh dim i: with random_split[i] the value is split into
/// integer parts R(i,0..n-2) and the remainder; otherwise index 0 holds it all.
inline Tensor oracle_local(const Tensor& G, const Shape& mesh_shape, const Placements& placements,
                           const std::vector<std::int64_t>& coord,
                           const std::vector<bool>& random_split) {
  Tensor W = G.clone();
  for (std::size_t i = 0; i < placements.size(); ++i) {
    if (!placements[i].is_partial()) continue;
    const std::int64_t n = mesh_shape[i];
    if (!random_split[i]) {
      if (coord[i] != 0) W = Tensor::zeros(G.shape(), G.dtype());
      continue;
    }
    if (coord[i] < n - 1) {
      W = integer_tensor(G.shape(), G.dtype(), 1000 + 10 * i + coord[i]);
    } else {
      Tensor rest = W.to(DType::F64);
      for (std::int64_t k = 0; k < n - 1; ++k) {
        Tensor part = integer_tensor(G.shape(), DType::F64, 1000 + 10 * i + k);
        for (std::int64_t e = 0; e < rest.numel(); ++e)
          rest.data<double>()[e] -= part.data<double>()[e];
      }
      W = rest.to(G.dtype());
    }
  }
  Tensor v = W;
  std::vector<std::int64_t> len = G.shape(), off(G.shape().size(), 0);
  for (std::size_t i = 0; i < placements.size(); ++i) {
    if (!placements[i].is_shard()) continue;
    const auto d = static_cast<std::size_t>(placements[i].normalized(G.dim()).dim());
    auto [o, l] = oracle_chunk(len[d], mesh_shape[i], coord[i]);
    off[d] += o;
    len[d] = l;
  }
  for (std::size_t d = 0; d < len.size(); ++d)
    v = v.narrow(static_cast<std::int64_t>(d), off[d], len[d]);
  return v.clone();
}

}  // namespace dtensor::testing
