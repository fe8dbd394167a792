// The operator dtensor-op runs: its seeded operands as DTensors, the library
// calls (forward and backward) for each OP, and the same tensors whole (for
// the oracle and the dump).
//
// Seeded exactly as dtensor-conv (tools/dtensor-conv/problem.h): one seed per
// tensor derived from --seed (conv_cli::Seeds), and every rank generates
// exactly its own shard with Tensor::rand_slice, so the data depend only on
// --seed, never on the number of ranks.
#pragma once

#include <optional>

#include "dtensor/core/device_mesh.h"
#include "dtensor/placement/dtensor.h"
#include "tools/dtensor-conv/problem.h"
#include "tools/dtensor-op/options.h"

namespace dtensor::op_cli {

using conv_cli::Seeds;

struct Operands {
  DTensor input;                  // placed as --placements
  std::optional<DTensor> weight;  // conv, conv_transpose: replicated
  std::optional<DTensor> bias;    // replicated; none with --no-bias
};

/// This rank's operands on `mesh` (a Partial(sum) input dim holds the data
/// at index 0 of that mesh dim and zeros elsewhere).
Operands make_operands(const Options& o, const DeviceMesh& mesh, const Seeds& seeds);

/// The same operands on a mesh of this rank alone: its shard of the input as
/// a whole (replicated) tensor, and the replicated weight and bias. What
/// --bench times the local op on.
Operands local_operands(const Operands& global, const DeviceMesh& own_mesh);

/// A seeded grad_output placed like `output`, except that its Partial dims
/// are Replicate (the gradient of a sum reaches every addend whole).
DTensor make_grad_output(const Options& o, const DTensor& output, const Seeds& seeds);

/// The library's forward of --op on the operands.
DTensor run_forward(const Options& o, const Operands& ops);

struct Grads {
  std::optional<DTensor> grad_input, grad_weight, grad_bias;
};
/// The library's backward of --op, given grad_output.
Grads run_backward(const Options& o, const Operands& ops, const DTensor& grad_output);

/// The whole tensors, in the run's dtype, on the host. Operands are
/// regenerated from the seeds; results are gathered (Partial ones reduced).
struct GlobalTensors {
  Tensor input, weight, bias, grad_output;            // undefined where the op has none
  Tensor output, grad_input, grad_weight, grad_bias;  // grads undefined without --backward
};

/// Collective over the mesh (full_tensor() of every result): call on every rank.
GlobalTensors gather_global(const Options& o, const Seeds& seeds, const DTensor& output,
                            const std::optional<DTensor>& grad_output, const Grads& grads);

}  // namespace dtensor::op_cli
