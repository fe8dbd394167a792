// The rank's geometry in a halo chain: per spatial dim, the range of every
// window layer's output it computes and the share of it it owns, read from
// the plan (halo_chain_plan.h) and the exchange's spans.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "dtensor/ops/window.h"
#include "ops/window/halo_chain_layers.h"
#include "ops/window/halo_chain_plan.h"

namespace dtensor::halo::chain {

struct Geometry {
  std::vector<detail::ChainDimPlan> dims;  // per spatial dim
  bool idle = false;                       // no output on this rank

  // [begin, end) of window layer k's output (k = -1: the window) per dim:
  // the range of every layer up to the next window layer.
  std::pair<std::int64_t, std::int64_t> range(std::size_t d, int k) const {
    const auto& s = k < 0 ? dims[d].steps.front() : dims[d].steps[static_cast<std::size_t>(k)];
    return k < 0 ? std::pair{s.in_begin, s.in_end} : std::pair{s.out_begin, s.out_end};
  }
  // The rank's share of window layer k's output along dim d (k >= 0).
  std::pair<std::int64_t, std::int64_t> share(std::size_t d, int k) const {
    const auto& s = dims[d].steps[static_cast<std::size_t>(k)];
    return {s.owned_begin, s.owned_end};
  }
  // The owned cells of a tensor over window layer k's output range.
  Tensor owned(const Tensor& t, int k) const {
    Tensor v = t;
    for (std::size_t d = 0; d < dims.size(); ++d)
      v = v.narrow(static_cast<std::int64_t>(d) + 2, share(d, k).first - range(d, k).first,
                   share(d, k).second - share(d, k).first);
    return v;
  }
  // What window layer k reads of its input `t` (over its input range):
  // all but the rows a strided chain's first layer skips.
  template <typename T>
  T used(const T& t, std::size_t k) const {
    T v = t;
    for (std::size_t d = 0; d < dims.size(); ++d) {
      const auto& s = dims[d].steps[k];
      if (s.skip_left + s.skip_right > 0)
        v = v.narrow(static_cast<std::int64_t>(d) + 2, s.skip_left,
                     s.in_end - s.in_begin - s.skip_left - s.skip_right);
    }
    return v;
  }
  bool skips(std::size_t k) const {
    return std::any_of(dims.begin(), dims.end(), [k](const detail::ChainDimPlan& p) {
      return p.steps[k].skip_left + p.steps[k].skip_right > 0;
    });
  }
  // The cells of a tensor over window layer k's range that the rank does not
  // own, as disjoint slabs: along each dim d, the part before and after the
  // owned range, spanning the owned range on the dims before d and the
  // whole range on the dims after.
  std::vector<Tensor> halo_slabs(const Tensor& t, int k) const {
    std::vector<Tensor> out;
    out.reserve(2 * dims.size());
    Tensor core = t;  // owned on the dims done so far
    for (std::size_t d = 0; d < dims.size(); ++d) {
      const auto dim = static_cast<std::int64_t>(d) + 2;
      const auto [begin, end] = range(d, k);
      const std::int64_t o0 = share(d, k).first - begin, o1 = share(d, k).second - begin;
      out.push_back(core.narrow(dim, 0, o0));
      out.push_back(core.narrow(dim, o1, end - begin - o1));
      core = core.narrow(dim, o0, o1 - o0);
    }
    return out;
  }
  bool owns_all(int k) const {
    for (std::size_t d = 0; d < dims.size(); ++d)
      if (range(d, k) != share(d, k)) return false;
    return true;
  }
  // Convolution k's local padding (left, right) per dim.
  ConvParams::Padding padding(std::size_t k) const {
    ConvParams::Padding out;
    for (const auto& dim : dims)
      out.emplace_back(dim.steps[k].pad_left, dim.steps[k].pad_right);
    return out;
  }
  // Whether convolution k fills its local padding from the rows it holds
  // (reflect, replicate: held_padding.h): it then runs on a padded copy of
  // its input and the kernel pads nothing.
  bool fills(const Layer& l, std::size_t k) const {
    if (idle || (l.boundary != Boundary::Reflect && l.boundary != Boundary::Replicate))
      return false;
    for (const auto& [left, right] : padding(k))
      if (left > 0 || right > 0) return true;
    return false;
  }
  // The kernel's parameters: the local padding as zeros, or none where the
  // convolution fills it (a ring has none).
  ConvParams params(const Layer& l, std::size_t k) const {
    ConvParams p = l.params;
    p.padding = fills(l, k) ? ConvParams::Padding(dims.size(), {0, 0}) : padding(k);
    p.padding_mode = PaddingMode::Zeros;
    return p;
  }
};

// `t` ([N, C, spatial...]) with room for `pads` around its spatial dims.
Shape padded_shape(Shape t, const ConvParams::Padding& pads);

// The rank's geometry from the exchange's spans (`global`: the input's shape).
Geometry geometry_of(const Chain& c, const WindowExchange& engine, const Shape& global);

// [N, C] (`nc`) and window layer k's output range (k = -1: the window).
Shape range_shape(const Shape& nc, const Geometry& g, int k);

// The spatial dim along which the rank's window reaches beyond its own
// input, when there is exactly one: its exchange is the one still in
// flight after WindowExchange::post().
std::optional<std::size_t> only_halo_dim(const Geometry& g);

}  // namespace dtensor::halo::chain
