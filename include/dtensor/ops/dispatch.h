// Dispatch: run an operator on DTensors.
//
// Default path: validate -> propagate (cached by the call's key) ->
// redistribute the inputs the propagator asks for -> run the local kernel ->
// wrap the outputs with the chosen specs. A registered handler replaces it;
// it gets an OpCall through which it can use any part of the default path.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "dtensor/ops/registry.h"
#include "dtensor/placement/rank_agreement.h"
#include "dtensor/placement/redistribute_cost.h"  // the propagator prices strategies with it

namespace dtensor {

class CallScopedGroup;

class OpCall {
 public:
  explicit OpCall(OpSchema schema, PendingAgreement agreement = {}, int message_tag = 0);
  ~OpCall();
  OpCall(const OpCall&) = delete;  // its groups refer to its agreement check
  OpCall& operator=(const OpCall&) = delete;

  const OpSchema& schema() const { return schema_; }
  /// Whether the operator's OpDef gives signatures or strategies (so that
  /// sharding() can be asked).
  bool has_strategies() const;
  /// The propagator's answer (computed on first use, cached across calls).
  const OutputSharding& sharding();
  /// The DTensor inputs redistributed to sharding().input_specs, in order.
  std::vector<DTensor> redistributed_inputs();
  /// Runs the local kernel on `inputs` (DTensor arguments, in order; by default
  /// the redistributed ones) and wraps the outputs with sharding().output_specs.
  std::vector<DTensor> run_default();
  /// The same on inputs the handler prepared itself (same specs as sharding()'s).
  std::vector<DTensor> run_kernel(const std::vector<DTensor>& inputs);

  /// The group of mesh dim `mesh_dim` (of the call's mesh) as this call
  /// communicates over it: point-to-point tags 0..7 are moved into the
  /// call's own tag space, and dispatch's agreement check is confirmed
  /// before the first wait or collective (before the first post where the
  /// group matches messages by order). A handler registered with
  /// HandlerOptions::defers_agreement communicates only through these.
  ProcessGroup& group(std::int64_t mesh_dim);
  /// The same over several mesh dims: the group of this rank's block over
  /// `mesh_dims` (DeviceMesh::get_group(dims); every dim: the mesh's group),
  /// tags and agreement as above.
  ProcessGroup& group(const std::vector<std::int64_t>& mesh_dims);

  /// Waits for dispatch's agreement check: throws InvalidArgument on every
  /// rank alike when the ranks were asked different things. Returns at once
  /// when already confirmed (or checks are off). group()'s waits, dispatch
  /// and redistributed_inputs()/run_* confirm by themselves; a handler
  /// needs this only before communicating outside group().
  void confirm_agreement() { agreement_.confirm(); }
  bool agreement_settled() const { return agreement_.settled(); }
  /// What dispatch does when the call returns: confirm_agreement(), or,
  /// inside backward() for a call that has not communicated, queue the check
  /// to be confirmed later (docs/custom-operators.md, "Agreement inside
  /// backward()").
  void finish_agreement();
  /// The call's point-to-point tag for `stream` (0..7), below 2^30: equal on
  /// every rank making this call and (but for a 2^-27 chance) different from
  /// other calls'. group() applies it; it is here for handlers that
  /// communicate otherwise.
  int message_tag(int stream = 0) const;

 private:
  OpSchema schema_;
  const OutputSharding* sharding_ = nullptr;
  PendingAgreement agreement_;
  int message_tag_ = 0;
  std::vector<std::unique_ptr<CallScopedGroup>> groups_;  // by mesh dim, made on first use
  // Blocks over several mesh dims, by the bit set of their dims.
  std::vector<std::pair<unsigned, std::unique_ptr<CallScopedGroup>>> block_groups_;
};

/// What dispatch does first, for a front end that fails before it can build
/// its call (an argument it cannot even encode): takes the call's number on
/// `mesh`'s group and checks agreement with `fingerprint` (say, the error's
/// hash), so the other ranks' dispatch meets it and every rank throws. Then
/// the caller throws its own error (reached when all failed alike).
void agree_before_failing(const DeviceMesh& mesh, std::size_t fingerprint, const std::string& op,
                          const std::string& description);

/// Runs `op` on `args` through its handler or the default path.
std::vector<DTensor> dispatch(const std::string& op, std::vector<OpArg> args);

/// Propagation only (no data moves): what dispatch would choose.
const OutputSharding& propagate(const OpSchema& schema);

/// Counters since start (or the last reset), for tests and tuning.
struct DispatchStats {
  std::uint64_t calls = 0;
  std::uint64_t cache_hits = 0;
  std::uint64_t cache_misses = 0;
  std::uint64_t inputs_redistributed = 0;
  std::uint64_t handler_calls = 0;
};
DispatchStats dispatch_stats();
void reset_dispatch_stats();
/// Forgets every cached propagation (after re-registering an operator's strategies).
void clear_propagation_cache();

}  // namespace dtensor
