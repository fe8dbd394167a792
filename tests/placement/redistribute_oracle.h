// Test-side oracle for DTensor layouts, written independently of the library:
// where each rank's shard lies (torch.chunk by enumeration, nested in mesh-dim
// order) and what a rank holds for Partial(sum) placements. Values are small
// integers, so sums are exact whatever the reduction order.
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
  for (std::int64_t q = 0; q < r; ++q)
    start += std::max<std::int64_t>(0, std::min(c, L - start));
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

/// The integer weight of index c in a linear split over n ranks: 2, 3, ...,
/// and the last makes them sum to 1 (n=2: 2,-1; n=3: 2,3,-4). A linear split
/// commutes with any reduction over other mesh dims, as real partial sums do.
inline double split_weight(std::int64_t c, std::int64_t n) {
  if (c < n - 1) return static_cast<double>(c + 2);
  double rest = 1;
  for (std::int64_t k = 0; k < n - 1; ++k)
    rest -= static_cast<double>(k + 2);
  return rest;
}

/// What the rank at `coord` holds for `placements` of the global tensor G.
/// For a Partial(sum) mesh dim i: with split[i] the value is weighted by
/// split_weight(coord[i]); otherwise index 0 holds it all.
inline Tensor oracle_local(const Tensor& G, const Shape& mesh_shape, const Placements& placements,
                           const std::vector<std::int64_t>& coord, const std::vector<bool>& split) {
  double weight = 1;
  for (std::size_t i = 0; i < placements.size(); ++i)
    if (placements[i].is_partial())
      weight *= split[i] ? split_weight(coord[i], mesh_shape[i]) : (coord[i] == 0 ? 1.0 : 0.0);
  Tensor W = G.to(DType::F64);
  for (std::int64_t e = 0; e < W.numel(); ++e)
    W.data<double>()[e] *= weight;
  W = W.to(G.dtype());
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
