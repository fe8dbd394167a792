// What `dtensor-ckpt info` prints: one line per tensor, or one JSON document.
#pragma once

#include <string>
#include <vector>

#include "dtensor/checkpoint/checkpoint.h"

namespace dtensor::ckpt_cli {

/// "NAME  shape=[8, 3]  dtype=f32  placements=S(0),R  mesh=[2, 2]  shards=2  bytes=96", one per
/// tensor.
std::string listing_text(const std::vector<CheckpointEntry>& entries);
/// {"dir": DIR, "tensors": [{"name", "shape", "dtype", "placements", "mesh_shape",
/// "shards", "bytes"}, ...]} on one line.
std::string listing_json(const std::string& dir, const std::vector<CheckpointEntry>& entries);

}  // namespace dtensor::ckpt_cli
