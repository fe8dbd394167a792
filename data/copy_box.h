// Copying one rank's box out of a C-order array lying in a mapped file: one
// memcpy per contiguous run (checkpoint/box.h), so only the pages of the box
// are touched.
#pragma once

#include <cstdint>
#include <string_view>

#include "checkpoint/box.h"
#include "dtensor/data/load_sharded.h"

namespace dtensor::data {

/// Copies the elements of `box` of the row-major array of shape `global`
/// (elements of `element_size` bytes from byte `data_offset` of `file`, which
/// the caller has checked holds them all) into `dst`, `box`'s row-major
/// layout. Adds what it read to `stats` when set.
void copy_box(std::string_view file, std::uint64_t data_offset, const Shape& global,
              std::size_t element_size, const checkpoint::Box& box, void* dst, LoadStats* stats);

}  // namespace dtensor::data
