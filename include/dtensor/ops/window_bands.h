// Running a window kernel on the tiles of WindowExchange::post where they
// lie. A halo window arrives as tiles (the rank's shard and the strips it
// received); a kernel that reads its window through strides (the pools',
// upsample's) can run on each tile as it is, as long as every output it
// computes reads inside that tile. So each dim's outputs are cut into bands:
// runs of outputs that read inside one segment between the tiles' edges, and
// the few that straddle an edge. A box of bands (one per dim) that reads
// inside one tile runs on a view of it; only the straddling boxes, a few
// rows wide, are assembled. The plan (window_bands) is a pure function of
// what each output reads and where the tiles' edges are. The built-in pools
// and upsample run their forwards this way; so can a stencil of your own
// (docs/custom-operators.md).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "dtensor/core/tensor.h"
#include "dtensor/ops/tiled_tensor.h"

namespace dtensor {

/// What each of a dim's outputs reads of the window: positions first[o] ..
/// last[o] (inclusive); first[o] > last[o] when it reads nothing.
struct OutputReads {
  std::vector<std::int64_t> first, last;
  std::int64_t outputs() const { return static_cast<std::int64_t>(first.size()); }
};

/// Outputs [out_begin, out_end) of one dim, reading window positions
/// [win_begin, win_end) (empty when they read nothing).
struct WindowBand {
  std::int64_t out_begin = 0, out_end = 0, win_begin = 0, win_end = 0;
  bool operator==(const WindowBand&) const = default;
};

/// One dim's outputs, in order, cut into bands: each maximal run of outputs
/// reading inside the same segment between consecutive `cuts` (the tiles'
/// edges, window positions; unsorted, repeats allowed), and each maximal
/// run of those reading across a cut. Outputs that read nothing join the
/// band before them (the first band when they lead). No outputs: no bands.
std::vector<WindowBand> window_bands(const OutputReads& reads, std::vector<std::int64_t> cuts);

/// The edges of `window`'s tiles along `tensor_dim` (each tile's first and
/// one-past-last position).
std::vector<std::int64_t> tile_edges(const TiledTensor& window, std::int64_t tensor_dim);

/// The window's positions `box` reads: `window` narrowed to each band's
/// window range (views of its tiles).
TiledTensor window_part(const TiledTensor& window, const std::vector<WindowBand>& box);

/// `part` as one tensor: its tile itself when it is one (a view), else its
/// positions copied (an empty part: an empty tensor).
Tensor assembled(const TiledTensor& part);

/// The outputs of `box`: `output` ([N, C, outputs...]) narrowed to each
/// band's outputs (a view, for the kernel to write).
Tensor band_outputs(const Tensor& output, const std::vector<WindowBand>& box);

/// The boxes of for_each_window_band, with the window's positions a box
/// reads left as tiles (`part`, views of the window's tiles): for a window
/// used as a destination (a gradient's tiles, WindowExchange::gradient),
/// where a box inside one tile is written in place (`part.is_whole()`) and
/// one across tiles through a buffer added into `part` (TiledTensor::add_).
void for_each_window_box(
    const TiledTensor& window, const std::vector<OutputReads>& reads,
    const std::function<void(const TiledTensor& part, const std::vector<WindowBand>& box)>& fn);

/// For every box of bands (one band per spatial dim, dims 2, 3, ... of
/// `window`): fn(piece, box), where `piece` is the window's positions the
/// box reads (a view of a tile when they lie in one, else those positions
/// assembled) and `box` the bands. `reads`: one entry per spatial dim. The
/// last spatial dim is one band: cut at a tile's edge it would leave rows of
/// one or two outputs, which cost the kernels more than copying them, so a
/// window whose last dim is split is assembled across it, as before tiles.
void for_each_window_band(
    const TiledTensor& window, const std::vector<OutputReads>& reads,
    const std::function<void(const Tensor& piece, const std::vector<WindowBand>& box)>& fn);

/// Writes a window's gradient box by box into its tiles
/// (WindowExchange::gradient's `window()`): zeroes them, then for every box
/// whose part holds positions calls fn(dst, box), which adds the gradient
/// of the box's outputs into `dst` (the box's window positions). `dst` is
/// the tile itself where the box lies in one and `in_place(tile, box)`, when
/// given, agrees; otherwise a zeroed buffer, added into the tiles after.
/// Every box adds because neighbouring boxes share positions.
void add_window_gradient(
    const TiledTensor& gradient, const std::vector<OutputReads>& reads,
    const std::function<void(const Tensor& dst, const std::vector<WindowBand>& box)>& fn,
    const std::function<bool(const Tensor& tile, const std::vector<WindowBand>& box)>& in_place =
        {});

}  // namespace dtensor
