// The rules both command lines (dtensor-conv's, dtensor-op's) share: exit
// codes, the usage error, the mesh and default placements for the world
// size, the input placements, the device. Every rank applies them to the
// same arguments before any communication, so every rank reaches the same
// verdict.
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>

#include "dtensor/core/dtype.h"
#include "dtensor/core/shape.h"
#include "dtensor/placement/placement.h"

namespace dtensor::cli {

/// Exit codes (documented in the help texts and docs/cli.md).
namespace exit_code {
constexpr int kOk = 0;
constexpr int kCheckFailed = 1;  // --check found an error over tolerance
constexpr int kUsage = 2;        // a bad argument
constexpr int kError = 3;        // the library raised an error while running
}  // namespace exit_code

/// A mistake on the command line. The message starts with the offending option.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Fills --mesh (empty: 1-D over the world) and --placements (empty: mesh
/// dim i of m shards tensor dim rank-m+i when that is a spatial dim, else
/// Replicate) and checks them against the world size and the input's rank.
/// Throws UsageError naming --mesh or --placements.
void resolve_mesh(Shape& mesh, Placements& placements, const Shape& input, int world_size);

/// Each --placements entry must name a dim of the `rank`-d input, and a
/// Partial one must sum. Throws UsageError naming --placements.
void check_input_placements(const Placements& placements, std::int64_t rank);

/// What dtensor::cuda::is_available() and unavailable_reason() say.
struct CudaAvailability {
  bool available = false;
  std::string reason;
};

/// `--device cuda` needs a CUDA build and a device on the rank's host;
/// throws UsageError naming --device and the reason otherwise. `ask` is
/// called for `--device cuda` only: asking loads the CUDA module and the
/// CUDA libraries it links, whose initialisers would cost every rank of a
/// CPU run ~70 ms and ~100 MiB of touched pages. Passed in so the rule is
/// testable without a GPU.
void check_device(DeviceType device, const std::function<CudaAvailability()>& ask);

}  // namespace dtensor::cli
