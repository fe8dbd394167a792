// The operator dtensor-op runs: its seeded operands as DTensors, the library
// calls (forward and backward) for each OP, and the same tensors whole (for
// the oracle and the dump).
//
// Seeded as dtensor-conv always was (tools/cli/seeds.h): one seed per
// tensor derived from --seed (cli::Seeds), and every rank generates
// exactly its own shard with Tensor::rand_slice, so the data depend only on
// --seed, never on the number of ranks. The operands the conv seeds do not
// cover take seeds derived from them (derived_seed): cat's inputs 1..K-1,
// batch_norm's running statistics, the losses' target. The running variance
// is 1 + rand / 2 (in [0.5, 1.5)); cross_entropy's target is the softmax over
// dim 1 of a seeded tensor (class probabilities), made whole on every rank
// and sliced to the rank's shard. The binary operators' other operand has
// its own derived seed; log, sqrt, rsqrt and pow draw their input as
// 1 + rand / 2 (in [0.5, 1.5)), computed in f64 and rounded to the dtype.
// binary_cross_entropy_with_logits' target is (1 + rand) / 2 (in [0, 1));
// cross_entropy's with --target indices is int64 [N, spatial...] drawn in
// [0, C) from rand (every 7th element ignore_index when that is no class),
// placed like the input's other dims (replicated along a class-dim shard);

// dropout's mask seed is derived from --seed too (dropout_seed).
#pragma once

#include <optional>
#include <utility>
#include <vector>

#include "dtensor/core/device_mesh.h"
#include "dtensor/placement/dtensor.h"
#include "tools/cli/seeds.h"
#include "tools/dtensor-op/options.h"

namespace dtensor::op_cli {

using cli::Seeds;

struct Operands {
  DTensor input;                     // placed as --placements
  std::optional<DTensor> weight;     // conv, conv_transpose, affine norms: replicated
  std::optional<DTensor> bias;       // replicated; none with --no-bias / --no-affine
  std::vector<DTensor> more_inputs;  // cat: inputs 1..K-1, placed as --placements
  std::optional<DTensor> running_mean, running_var;  // batch_norm: replicated
  std::optional<DTensor> target;                     // losses: placed as --placements
  // Binary operators: placed as --placements when its shape is the input's,
  // else replicated.
  std::optional<DTensor> other;
};

/// The seed of operand `which` derived from `base` (a splitmix64 step).
std::uint64_t derived_seed(std::uint64_t base, std::uint64_t which);

/// dropout's mask seed for --seed `seed` (its stream is 0).
std::uint64_t dropout_seed(std::uint64_t seed);

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

/// What the forward returns: the output, and batch_norm's running
/// statistics to use from now on (updated in training, the inputs in eval).
struct Forward {
  Forward(DTensor y, std::optional<DTensor> rm = std::nullopt,
          std::optional<DTensor> rv = std::nullopt)
      : output(std::move(y)), running_mean(std::move(rm)), running_var(std::move(rv)) {}
  DTensor output;
  std::optional<DTensor> running_mean, running_var;
};

/// The library's forward of --op on the operands.
Forward run_forward(const Options& o, const Operands& ops);

struct Grads {
  std::optional<DTensor> grad_input, grad_weight, grad_bias;
  std::vector<DTensor> grad_more_inputs;  // cat: of inputs 1..K-1
  std::optional<DTensor> grad_other;      // binary operators: of the other operand
};
/// The library's backward of --op, given grad_output (the losses take none:
/// the gradient of the loss is 1).
Grads run_backward(const Options& o, const Operands& ops,
                   const std::optional<DTensor>& grad_output);

/// The backward through autograd, as a user's program gets it: the input's
/// gradient (and the other operand's, summed back to its shape, placed like
/// it), of the op's forward on leaves detached from `ops`.
Grads autograd_backward(const Options& o, const Operands& ops,
                        const std::optional<DTensor>& grad_output);

/// The whole tensors, in the run's dtype, on the host. Operands are
/// regenerated from the seeds; results are gathered (Partial ones reduced).
struct GlobalTensors {
  Tensor input, weight, bias, grad_output;            // undefined where the op has none
  Tensor output, grad_input, grad_weight, grad_bias;  // grads undefined without --backward
  std::vector<Tensor> more_inputs, grad_more_inputs;  // cat: inputs 1..K-1 and their grads
  Tensor running_mean, running_var;                   // batch_norm: before the forward
  Tensor running_mean_out, running_var_out;           // and after
  Tensor target;                                      // losses
  Tensor other, grad_other;                           // binary operators
};

/// Collective over the mesh (full_tensor() of every result): call on every rank.
GlobalTensors gather_global(const Options& o, const Seeds& seeds, const Forward& forward,
                            const std::optional<DTensor>& grad_output, const Grads& grads);

}  // namespace dtensor::op_cli
