// --dump DIR: the whole operands and results as .npy files plus meta.json, so
// that an independent checker (tools/check_dump.py, PyTorch) can replay the
// convolution. Format: docs/cli.md.
#pragma once

#include <string>

#include "dtensor/placement/placement.h"
#include "tools/dtensor-conv/options.h"
#include "tools/dtensor-conv/problem.h"

namespace dtensor::conv_cli {

/// The meta.json text: every parameter needed to replay the run.
std::string dump_metadata(const Options& o, int world_size, const Placements& output_placements,
                          const GlobalTensors& g);

/// Creates `dir` (and parents) and writes the defined tensors of `g` and
/// meta.json. Local: rank 0 calls it. Throws std::runtime_error naming the path.
void write_dump(const std::string& dir, const Options& o, int world_size,
                const Placements& output_placements, const GlobalTensors& g);

}  // namespace dtensor::conv_cli
