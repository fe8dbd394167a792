// The operator registry: what the dispatcher knows about each operator.
//
// An operator has (any of):
//  - an OpDef: how to validate a call, the outputs' global shapes, and its
//    sharding strategies (per-mesh-dim signatures, expanded over the mesh, or
//    whole-mesh strategies);
//  - local kernels keyed by (device type, dtype), run on local tensors;
//  - a custom handler that replaces the default path for the operator.
// The library registers its own operators through exactly this interface.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dtensor/ops/op_schema.h"

namespace dtensor {

/// One mesh dim's valid placements: one per DTensor input, one per output.
struct ShardingSignature {
  Placements inputs{};
  Placements outputs{};
};

/// A full strategy: for each DTensor input and each output, its placements
/// (one per mesh dim).
struct ShardingStrategy {
  std::vector<Placements> inputs{};
  std::vector<Placements> outputs{};
  std::string str() const;
};

struct TensorMeta {
  Shape shape{};
  DType dtype{};
};

/// The propagator's answer for a call.
struct OutputSharding {
  ShardingStrategy strategy{};
  std::vector<DTensorSpec> input_specs{};   // what each DTensor input is redistributed to
  std::vector<DTensorSpec> output_specs{};  // what the outputs are
  double cost_bytes = 0;                    // estimated bytes the redistribution moves per rank
  bool needs_redistribute = false;
};

/// What a local kernel gets: the arguments with DTensors replaced by their
/// local tensors (already redistributed), and the specs on both sides.
struct KernelCall {
  const OpSchema& schema;
  std::vector<OpArg> local_args;
  std::vector<DTensorSpec> input_specs;
  std::vector<DTensorSpec> output_specs;
  const Tensor& local(std::size_t i) const;  // local tensor at argument position i
};
using LocalKernel = std::function<std::vector<Tensor>(const KernelCall&)>;

class OpCall;
/// A custom handler gets the whole call and returns the outputs.
using OpHandler = std::function<std::vector<DTensor>(OpCall&)>;

/// What an operator's backward gets: the forward call as it was made, its
/// outputs, and the gradient flowing into each output (nullopt where none
/// does: treat it as zeros).
struct BackwardCall {
  const OpSchema& forward;
  const std::vector<DTensor>& outputs;
  const std::vector<std::optional<DTensor>>& grad_outputs;
  /// One flag per DTensor argument of the forward (in argument order):
  /// whether its gradient is wanted. Skip the work for the others.
  const std::vector<bool>& needs_input_grad;
};
/// Returns one gradient per DTensor argument of the forward, in argument
/// order (nullopt where not wanted, or zero). Any placement will do: the
/// engine places each like the argument it belongs to.
using BackwardFunction = std::function<std::vector<std::optional<DTensor>>(const BackwardCall&)>;

struct OpDef {
  std::string name{};
  /// Throws InvalidArgument naming the bad argument. Runs on every rank before
  /// anything else; must depend only on what every rank knows (specs, values).
  std::function<void(const OpSchema&)> validate{};
  /// Global shape and dtype of each output.
  std::function<std::vector<TensorMeta>(const OpSchema&)> output_meta{};
  /// Per-mesh-dim signatures; the propagator takes every combination over the mesh dims.
  std::function<std::vector<ShardingSignature>(const OpSchema&)> signatures{};
  /// Or whole strategies, when mesh dims are not independent.
  std::function<std::vector<ShardingStrategy>(const OpSchema&)> strategies{};
  /// The gradient of the operator (docs/training.md). With it, a call whose
  /// DTensor arguments require grad is recorded for backward(). It runs with
  /// recording off and may call any operator. Without it (and `differentiable`
  /// left true) such a call is recorded too, and a backward() that reaches
  /// its results raises NotSupported naming the operator, as PyTorch's
  /// "derivative for ... is not implemented": the graph is never cut silently.
  BackwardFunction backward{};
  /// False: the operator has no gradient on purpose (its results do not depend
  /// differentiably on its inputs: a comparison, an index, a count). Its
  /// results never require grad, and backward() passes it by, as PyTorch's
  /// non-differentiable outputs.
  bool differentiable = true;
  /// True: DTensor arguments may be I64 (integers: cross_entropy's class
  /// indices), and validate checks which. Left false, dispatch refuses an I64
  /// argument before validate runs (InvalidArgument naming the operator and
  /// the argument), so no floating strategy or kernel ever meets integers.
  bool accepts_integer_arguments = false;
};

/// Registering a name twice throws InvalidArgument unless `override_existing`.
void register_op(OpDef def, bool override_existing = false);
/// The local kernel the default path runs for `op` on (device, dtype) tensors.
void register_kernel(const std::string& op, DeviceType device, DType dtype, LocalKernel kernel,
                     bool override_existing = false);
/// A handler that replaces the default path for `op` (the OpDef's validate
/// still runs first when there is one).
struct HandlerOptions {
  /// Dispatch's agreement check (every rank was asked the same) is posted,
  /// not awaited, before the handler runs; the handler communicates only
  /// through OpCall::group(), which confirms the check before the first wait
  /// or collective, so the check travels with the handler's first messages.
  /// Dispatch confirms after the handler returns, if nothing did before.
  /// When false, dispatch confirms before calling the handler.
  bool defers_agreement = false;
};
/// Replacing a definition, kernel or handler needs `override_existing` and
/// logs a warning (a plugin that replaces a built-in operator says so).
void register_op_handler(const std::string& op, OpHandler handler, bool override_existing = false,
                         HandlerOptions options = {});
/// The handler `op` has now (and its options), as a callable that stays
/// valid whatever replaces it: an override captures it to call the handler it
/// replaces, e.g.
///   HandlerOptions opts;
///   auto builtin = *current_handler("convolution", &opts);
///   register_op_handler("convolution", [builtin](OpCall& c) { ...; return builtin(c); },
///                       /*override_existing=*/true, opts);
std::optional<OpHandler> current_handler(const std::string& op, HandlerOptions* options = nullptr);
/// Removes an operator's definition, kernels and handler (plugins being unloaded, tests).
void unregister_op(const std::string& op);
/// Whether `op` has a definition or a handler (kernels alone do not count).
bool has_op(const std::string& op);
/// The names has_op() accepts, sorted.
std::vector<std::string> registered_ops();

/// Access used by the dispatcher (and by handlers that want a kernel).
/// Naming: op_* throws when nothing is registered, find_* returns nullptr.
const OpDef& op_def(const std::string& op);       // InvalidArgument "unknown operator" when missing
const OpDef* find_op_def(const std::string& op);  // nullptr when missing
/// The local kernel for (device, dtype); NotSupported naming all three when missing.
const LocalKernel& op_kernel(const std::string& op, DeviceType device, DType dtype);
const OpHandler* find_handler(const std::string& op);  // nullptr when missing
/// The same, and the options it was registered with (in one lookup).
const OpHandler* find_handler(const std::string& op, HandlerOptions& options);

}  // namespace dtensor
