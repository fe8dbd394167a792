// Mixed precision, as torch.autocast("cpu", torch.bfloat16).
//
// Inside an AutocastScope the operators that gain from a lower precision
// (convolution, conv_transpose, linear) run in bf16 on f32 inputs, weights
// and biases; those that need range or long accumulations (the
// normalisations, the losses, sums, means and variances) run in f32 on bf16
// inputs; those that combine tensors (cat, the binary operators) run in the
// widest floating dtype among their inputs. Everything else runs in the
// dtype it is given. The casts are ordinary calls of "to" (dtype_cast.h)
// that autograd records, so f32 parameters stay f32 and get f32 gradients,
// and a bf16 activation's gradient is bf16. f64 tensors are never lowered.
//
// The state is per thread, as torch's. Nothing is cast outside a scope, nor
// inside an operator (what a handler calls, and every backward, runs in the
// dtypes the forward chose).
#pragma once

#include <string>
#include <vector>

#include "dtensor/core/dtype.h"
#include "dtensor/ops/op_schema.h"

namespace dtensor {

/// Turns autocast on (or off, with enabled = false) for this thread until
/// the scope ends, restoring the previous state then; scopes nest. `dtype`:
/// the lower precision, bf16 (default) or f16 (InvalidArgument naming
/// dtype otherwise).
class AutocastScope {
 public:
  explicit AutocastScope(bool enabled = true, DType dtype = DType::BF16);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  bool previous_enabled_;
  DType previous_dtype_;
};

bool autocast_enabled();
/// The lower precision of the innermost enabled scope (bf16 outside any).
DType autocast_dtype();

enum class AutocastPolicy {
  None,            // runs in the dtypes it is given
  LowerPrecision,  // f32 inputs cast to the scope's dtype
  Float32,         // bf16 / f16 inputs cast to f32
  Widest,          // every floating input cast to the widest among them
};

/// How autocast treats `op` (the built-in table: docs/training.md).
AutocastPolicy autocast_policy(const std::string& op);
/// Gives a user's operator (or a built-in one) a policy.
void set_autocast_policy(const std::string& op, AutocastPolicy policy);

namespace detail {
/// The arguments a call of `op` runs with under the current state: the
/// arguments themselves outside a scope or when `op` has no policy.
std::vector<OpArg> autocast_arguments(const std::string& op, std::vector<OpArg> args);

/// Turns autocast off while an operator runs (dispatch and backward hold
/// one), so that nothing an operator calls is cast again.
class AutocastSuspended {
 public:
  AutocastSuspended();
  ~AutocastSuspended();
  AutocastSuspended(const AutocastSuspended&) = delete;
  AutocastSuspended& operator=(const AutocastSuspended&) = delete;

 private:
  bool previous_;
};
}  // namespace detail

}  // namespace dtensor
