// Dispatch: run an operator on DTensors.
//
// Default path: validate -> propagate (cached by the call's key) ->
// redistribute the inputs the propagator asks for -> run the local kernel ->
// wrap the outputs with the chosen specs. A registered handler replaces it;
// it gets an OpCall through which it can use any part of the default path.
#pragma once

#include <cstdint>
#include <vector>

#include "dtensor/ops/registry.h"

namespace dtensor {

class OpCall {
 public:
  explicit OpCall(OpSchema schema);
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

 private:
  OpSchema schema_;
  const OutputSharding* sharding_ = nullptr;
};

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

/// Estimated bytes per rank that redistributing `src` to `dst` moves
/// (infinity when the transition is impossible). The propagator's cost model.
double redistribute_cost_bytes(const DTensorSpec& src, const Placements& dst);

}  // namespace dtensor
