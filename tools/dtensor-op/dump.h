// --dump DIR: the whole operands and results as .npy files (dtensor-conv's
// writer, tools/cli/npy.h) plus meta.json with every parameter as
// resolved, so that tools/check_op_dump.py can replay the operator with
// PyTorch. Format: docs/cli.md.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "dtensor/placement/placement.h"
#include "tools/dtensor-op/options.h"
#include "tools/dtensor-op/problem.h"

namespace dtensor::op_cli {

/// Each placement as meta.json and --json spell it ("S(3)", "R", "P(sum)").
std::vector<std::string> placement_strings(const Placements& ps);

/// The files a dump holds, in order: (tensor name, file name) of each
/// defined tensor of `g`.
std::vector<std::pair<std::string, std::string>> dump_files(const GlobalTensors& g);

/// The meta.json text (one JSON object): "op" and the parameters that apply
/// to it, with dtensor-conv's field names where they overlap.
std::string dump_metadata(const Options& o, int world_size, const Placements& output_placements,
                          const GlobalTensors& g);

/// Creates `dir` (and parents) and writes the defined tensors of `g` and
/// meta.json (`meta_json`, one line). Local: rank 0 calls it. Throws
/// std::runtime_error naming the path.
void write_dump(const std::string& dir, const std::string& meta_json, const GlobalTensors& g);

}  // namespace dtensor::op_cli
