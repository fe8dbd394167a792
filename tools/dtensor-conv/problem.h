// The convolution dtensor-conv runs: its seeded operands as DTensors, and the
// same tensors whole (for the oracle and the dump).
//
// Every rank generates exactly its own shard with Tensor::rand_slice, so the
// data depend only on --seed, never on the number of ranks, and nothing is
// scattered (which would also pollute the traffic counters).
#pragma once

#include <cstdint>
#include <optional>

#include "dtensor/core/device_mesh.h"
#include "dtensor/ops/convolution.h"
#include "dtensor/placement/dtensor.h"
#include "tools/dtensor-conv/options.h"

namespace dtensor::conv_cli {

/// One seed per tensor, derived from --seed so that they differ from each other.
struct Seeds {
  std::uint64_t input = 0, weight = 0, bias = 0, grad_output = 0;
  static Seeds from(std::uint64_t seed);
};

struct Operands {
  DTensor input;                // placed as --placements
  DTensor weight;               // replicated
  std::optional<DTensor> bias;  // replicated; none with --no-bias
};

/// This rank's operands. A Partial(sum) input dim holds the data at index 0
/// of that mesh dim and zeros elsewhere, so that the sum is the global input.
Operands make_operands(const Options& o, const DeviceMesh& mesh, const Seeds& seeds);

/// A seeded grad_output placed like `output`, except that its Partial dims are
/// Replicate (the gradient of a sum reaches every addend whole).
DTensor make_grad_output(const Options& o, const DTensor& output, const Seeds& seeds);

/// The whole tensors, in the run's dtype. Operands are regenerated from the
/// seeds; results are redistributed to Replicate (Partial ones reduced).
struct GlobalTensors {
  Tensor input, weight, bias, grad_output;            // bias undefined with --no-bias
  Tensor output, grad_input, grad_weight, grad_bias;  // grads undefined without --backward
};

/// Collective over the mesh (full_tensor() of every result): call on every rank.
GlobalTensors gather_global(const Options& o, const Seeds& seeds, const DTensor& output,
                            const std::optional<DTensor>& grad_output,
                            const std::optional<ConvGrads>& grads);

/// Bytes this rank has sent and received so far over the world group and
/// every group of `mesh` (each group keeps its own counters).
struct Traffic {
  std::uint64_t sent = 0, received = 0;
};
Traffic traffic(const DeviceMesh& mesh);

}  // namespace dtensor::conv_cli
