// A tensor held in pieces: the shape of one logical tensor and non-overlapping
// tiles that cover it, each a tensor (any strides) placed at an offset.
//
// Why: a halo convolution's window is the rank's own shard plus the strips it
// received. Copying them into one buffer costs a full pass over the input, and
// a kernel that reorders its input anyway (oneDNN's blocked layouts) can read
// the pieces where they lie. In the backward pass the same idea runs the other
// way: the kernel writes the window's gradient straight into the owned
// gradient and into the buffers that go back to the neighbours.
#pragma once

#include <vector>

#include "dtensor/core/tensor.h"

namespace dtensor {

class TiledTensor {
 public:
  struct Tile {
    Tensor data{};
    Shape offset{};  // position of data's first element in the logical tensor
  };

  TiledTensor() = default;
  TiledTensor(Shape shape, DType dtype, Device device);
  /// One tile that is the whole tensor.
  static TiledTensor whole(const Tensor& t);

  /// Adds a tile. InvalidArgument when it has another dtype, device or rank, or
  /// reaches outside the shape, or overlaps a tile already added. Empty tiles
  /// are dropped.
  void add(const Tensor& data, const Shape& offset);

  const Shape& shape() const { return shape_; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  std::int64_t numel() const { return shape_numel(shape_); }
  const std::vector<Tile>& tiles() const { return tiles_; }

  /// Positions [start, start + length) along `dim`: the tiles cut to that
  /// range (views, no copy), offsets relative to `start`.
  TiledTensor narrow(std::int64_t dim, std::int64_t start, std::int64_t length) const;

  /// Whether the tiles cover every element (they never overlap).
  bool complete() const;
  /// One tile holding the whole tensor: the kernels take it as it is.
  bool is_whole() const;

  /// The logical tensor in one buffer: the single tile itself when whole, else
  /// a contiguous copy. InvalidArgument when the tiles do not cover it.
  Tensor assemble() const;
  /// Writes the tiles into `dst` (the logical shape, any strides: a view of
  /// a larger buffer); positions no tile covers are left as they are.
  void copy_to(const Tensor& dst) const;
  /// Tiles used as destinations: copies the matching region of `full` (the
  /// logical shape) into every tile.
  void scatter(const Tensor& full) const;
  /// Tiles used as destinations: adds the matching region of `full` (the
  /// logical shape) into every tile.
  void add_(const Tensor& full) const;
  /// Tiles used as destinations: zeroes every tile.
  void zero_() const;

 private:
  Shape shape_;
  DType dtype_ = DType::F32;
  Device device_;
  std::vector<Tile> tiles_;
};

}  // namespace dtensor
