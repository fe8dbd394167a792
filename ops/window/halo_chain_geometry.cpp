// The rank's geometry in a halo chain (halo_chain_geometry.h).
#include "ops/window/halo_chain_geometry.h"

#include <algorithm>

namespace dtensor::halo::chain {

Shape padded_shape(Shape t, const ConvParams::Padding& pads) {
  for (std::size_t d = 0; d < pads.size(); ++d)
    t[d + 2] += pads[d].first + pads[d].second;
  return t;
}

Geometry geometry_of(const Chain& c, const WindowExchange& engine, const Shape& global) {
  Geometry g;
  g.idle = !engine.has_output();
  for (std::size_t d = 0; d < engine.spans().size(); ++d) {
    const WindowSpan& s = engine.spans()[d];
    const std::int64_t o0 = s.output.offset, o1 = s.output.offset + s.output.length;
    const auto convs = window_layers(c, d);
    std::int64_t begin = s.origin, end = s.origin + s.length;
    if (g.idle) {  // the window the rank would read, were there output on every dim
      const WindowDim w = detail::chain_window(convs);
      const bool ring = detail::chain_is_ring(convs);
      const auto [first, last] = w.reads(global[d + 2], o0, o1);
      begin = ring ? first : std::max<std::int64_t>(0, first);
      end = ring ? last + 1 : std::min(global[d + 2], std::max(begin, last + 1));
    }
    g.dims.push_back(detail::plan_chain_dim(global[d + 2], o0, o1, begin, end, convs));
  }
  return g;
}

Shape range_shape(const Shape& nc, const Geometry& g, int k) {
  Shape s = nc;
  for (std::size_t d = 0; d < g.dims.size(); ++d)
    s.push_back(g.range(d, k).second - g.range(d, k).first);
  return s;
}

std::optional<std::size_t> only_halo_dim(const Geometry& g) {
  std::optional<std::size_t> found;
  for (std::size_t d = 0; d < g.dims.size(); ++d) {
    const auto [begin, end] = g.range(d, -1);
    if (begin == g.dims[d].owned_begin && end == g.dims[d].owned_end) continue;
    if (found) return std::nullopt;
    found = d;
  }
  return found;
}

}  // namespace dtensor::halo::chain
