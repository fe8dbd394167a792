// Command line of dtensor-conv, parsed and validated apart from running
// anything, so that the tests can check every rule without starting processes.
//
// Validation happens in two pure steps that every rank runs on the same input
// before any communication: parse_options (the arguments alone) and
// resolve_for_world (against the world size the launcher set). Every rank thus
// reaches the same verdict, and a bad argument never leaves one rank erroring
// while the others wait for it.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "dtensor/core/dtype.h"
#include "dtensor/core/shape.h"
#include "dtensor/ops/conv_params.h"
#include "dtensor/placement/placement.h"
#include "tools/cli/command_line.h"

namespace dtensor::conv_cli {

namespace exit_code = cli::exit_code;
using cli::UsageError;

struct Options {
  /// --mesh; empty: a 1-D mesh over the whole world (filled by resolve_for_world).
  Shape mesh;
  /// --placements, one per mesh dim; empty: the default (see resolve_for_world).
  Placements placements;
  Shape input{2, 4, 16, 16};                 // --input N,C,spatial...
  std::optional<std::int64_t> out_channels;  // --out-channels; default C
  std::vector<std::int64_t> kernel{3};       // --kernel, 1 or one per spatial dim
  ConvParams params;                         // --stride, --padding(-lr), --dilation, --groups
  bool bias = true;                          // --no-bias clears it
  DType dtype = DType::F32;                  // --dtype
  DeviceType device = DeviceType::CPU;       // --device cpu|cuda
  std::uint64_t seed = 0;                    // --seed
  bool backward = false;                     // --backward
  bool check = false;                        // --check
  std::optional<std::string> dump;           // --dump DIR
  bool bench = false;                        // --bench
  int iters = 10;                            // --iters (with --bench)
  int warmup = 2;                            // --warmup (with --bench)
  bool json = false;                         // --json
  bool help = false;                         // --help / -h

  std::int64_t spatial_dims() const { return static_cast<std::int64_t>(input.size()) - 2; }
  /// [OC, C/groups, k...], with kernel and out_channels expanded.
  Shape weight_shape() const;
  /// params expanded to the spatial dims (every list one entry per dim).
  ConvParams conv_params() const;
};

/// Parses the arguments after argv[0]. Throws UsageError naming the option. With
/// --help nothing else is checked.
Options parse_options(const std::vector<std::string>& args);

/// Fills the defaults that depend on the world size (the mesh, the placements)
/// and checks the options against it. Throws UsageError naming the option.
/// Default placements: mesh dim i of m shards tensor dim rank-m+i when that is
/// a spatial dim, else Replicate (1-D mesh: the last spatial dim).
void resolve_for_world(Options& o, int world_size);

/// One line: "usage: dtensor-conv [options]".
std::string usage_line();
/// The full --help text.
std::string help_text();

}  // namespace dtensor::conv_cli
