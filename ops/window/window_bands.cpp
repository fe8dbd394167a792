#include "dtensor/ops/window_bands.h"

#include <algorithm>
#include <optional>

#include "dtensor/core/errors.h"

namespace dtensor {

std::vector<WindowBand> window_bands(const OutputReads& reads, std::vector<std::int64_t> cuts) {
  DTENSOR_CHECK_ARG(reads.first.size() == reads.last.size(), "window",
                    "internal: {} first and {} last reads", reads.first.size(), reads.last.size());
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  // The segment holding position x: the number of cuts at or before it.
  const auto segment = [&](std::int64_t x) {
    return static_cast<std::int64_t>(std::upper_bound(cuts.begin(), cuts.end(), x) - cuts.begin());
  };
  std::vector<WindowBand> bands;
  // The current band's kind: 2 * segment inside one segment, 2 * segment + 1
  // across the cut after it; none while it holds only outputs reading nothing.
  std::optional<std::int64_t> kind;
  for (std::int64_t o = 0; o < reads.outputs(); ++o) {
    const auto i = static_cast<std::size_t>(o);
    const std::int64_t first = reads.first[i], last = reads.last[i];
    if (first > last) {  // reads nothing: joins the band it is in
      if (bands.empty()) bands.push_back({o, o, 0, 0});
      bands.back().out_end = o + 1;
      continue;
    }
    const std::int64_t s = segment(first);
    const std::int64_t k = segment(last) == s ? 2 * s : 2 * s + 1;
    if (bands.empty() || (kind && *kind != k)) {
      bands.push_back({o, o + 1, first, last + 1});
    } else {
      WindowBand& b = bands.back();
      b.out_end = o + 1;
      const bool empty = b.win_begin == b.win_end;
      b.win_begin = empty ? first : std::min(b.win_begin, first);
      b.win_end = empty ? last + 1 : std::max(b.win_end, last + 1);
    }
    kind = k;
  }
  return bands;
}

std::vector<std::int64_t> tile_edges(const TiledTensor& window, std::int64_t tensor_dim) {
  const auto d = static_cast<std::size_t>(tensor_dim);
  std::vector<std::int64_t> edges;
  for (const TiledTensor::Tile& t : window.tiles()) {
    edges.push_back(t.offset[d]);
    edges.push_back(t.offset[d] + t.data.shape()[d]);
  }
  return edges;
}

namespace {
// `t` ([N, C, spatial...]: a Tensor or a TiledTensor) narrowed along each
// spatial dim to the box's outputs, or to the window positions they read.
template <typename T>
T narrowed(T t, const std::vector<WindowBand>& box, bool outputs) {
  for (std::size_t i = 0; i < box.size(); ++i) {
    const std::int64_t begin = outputs ? box[i].out_begin : box[i].win_begin;
    const std::int64_t end = outputs ? box[i].out_end : box[i].win_end;
    t = t.narrow(static_cast<std::int64_t>(i) + 2, begin, end - begin);
  }
  return t;
}
}  // namespace

TiledTensor window_part(const TiledTensor& window, const std::vector<WindowBand>& box) {
  return narrowed(window, box, false);
}

Tensor band_outputs(const Tensor& output, const std::vector<WindowBand>& box) {
  return narrowed(output, box, true);
}

Tensor assembled(const TiledTensor& part) {
  // One tile: the view itself; across tiles: those few positions copied.
  return part.numel() == 0 ? Tensor::empty(part.shape(), part.dtype(), part.device())
                           : part.assemble();
}

void for_each_window_box(
    const TiledTensor& window, const std::vector<OutputReads>& reads,
    const std::function<void(const TiledTensor& part, const std::vector<WindowBand>& box)>& fn) {
  DTENSOR_CHECK_ARG(window.shape().size() == reads.size() + 2, "window",
                    "internal: {} spatial dims of reads for a window {}", reads.size(),
                    shape_str(window.shape()));
  std::vector<std::vector<WindowBand>> bands;
  for (std::size_t i = 0; i < reads.size(); ++i) {
    // The last dim is not cut: a band across its tiles' edge would be rows
    // of one or two outputs, and the kernels' cost per row exceeds copying
    // them (measured: upsample 20% slower sharded along W when cut).
    const bool last = i + 1 == reads.size();
    const auto edges =
        last ? std::vector<std::int64_t>{} : tile_edges(window, static_cast<std::int64_t>(i) + 2);
    bands.push_back(window_bands(reads[i], edges));
    if (bands.back().empty()) return;  // no outputs along this dim
  }
  // Every box, the last dim's bands innermost.
  std::vector<std::size_t> at(reads.size(), 0);
  std::vector<WindowBand> box(reads.size());
  while (true) {
    for (std::size_t i = 0; i < reads.size(); ++i)
      box[i] = bands[i][at[i]];
    fn(window_part(window, box), box);
    std::size_t i = reads.size();
    while (i > 0 && ++at[i - 1] == bands[i - 1].size())
      at[--i] = 0;
    if (i == 0) return;
  }
}

void for_each_window_band(
    const TiledTensor& window, const std::vector<OutputReads>& reads,
    const std::function<void(const Tensor& piece, const std::vector<WindowBand>& box)>& fn) {
  for_each_window_box(window, reads,
                      [&](const TiledTensor& part, const std::vector<WindowBand>& box) {
                        fn(assembled(part), box);
                      });
}

void add_window_gradient(
    const TiledTensor& gradient, const std::vector<OutputReads>& reads,
    const std::function<void(const Tensor& dst, const std::vector<WindowBand>& box)>& fn,
    const std::function<bool(const Tensor& tile, const std::vector<WindowBand>& box)>& in_place) {
  gradient.zero_();
  for_each_window_box(
      gradient, reads, [&](const TiledTensor& part, const std::vector<WindowBand>& box) {
        if (part.numel() == 0) return;  // its outputs read nothing
        if (part.is_whole() && (!in_place || in_place(part.tiles().front().data, box))) {
          fn(part.tiles().front().data, box);
          return;
        }
        const Tensor buffer = Tensor::zeros(part.shape(), part.dtype(), part.device());
        fn(buffer, box);
        part.add_(buffer);
      });
}

}  // namespace dtensor
