// What a halo chain's two handlers share: the state the forward keeps for
// the backward, the batch's pieces, and the reductions its norms' statistics
// are merged over.
#pragma once

#include <cstdint>
#include <vector>

#include "dtensor/ops/dispatch.h"
#include "dtensor/ops/kernels/norm.h"
#include "dtensor/ops/window.h"
#include "ops/norm/norm_stats.h"
#include "ops/norm/stat_reduction.h"
#include "ops/window/halo_chain_call.h"
#include "ops/window/halo_chain_layers.h"

namespace dtensor::halo::chain {

// The exchanges' streams: the window, the gradient going back, the norms'
// statistics and sums.
constexpr int kWindowStream = 0, kGradientStream = 1, kStatsStream = 2;

// What the forward keeps for the backward: a norm's input and output over its
// range and its statistics.
struct NormState {
  Tensor input, output;  // over the layer's range
  norm::Stats stats;
};

// The state of one call: what its forward keeps (`save`: a backward will
// follow) and the autograd node holds for the backward.
struct ChainState {
  bool save = false;
  // Per window layer (convolution, pool): its input, the first's the window.
  std::vector<TiledTensor> window_inputs;
  std::vector<NormState> norms;
  std::vector<Tensor> activation_inputs;  // per layer: an activation's input
};

// The state of the call in progress on this thread (none: null): the front
// end and the node hand it to the handlers through dispatch, which carries
// only values.
ChainState* current_state();

// Makes `s` the thread's current state for its lifetime.
class StateScope {
 public:
  explicit StateScope(ChainState* s);
  ~StateScope();
  StateScope(const StateScope&) = delete;
  StateScope& operator=(const StateScope&) = delete;

 private:
  ChainState* previous_;
};

// A parameter's local tensor (contiguous), or none where `index` is -1.
Tensor local_or_none(const std::vector<DTensor>& in, int index);

// Samples [begin, begin + length) of the rank's batch.
struct BatchPiece {
  std::int64_t begin = 0, length = 0;
};

// The piece's samples of `t` ([batch, ...]).
inline Tensor samples_of(const Tensor& t, const BatchPiece& p) {
  return t.narrow(0, p.begin, p.length);
}

// The piece's rows of per-statistic records (`rows`: the same number for
// every sample of the `batch`; a group norm's are its groups).
Tensor statistics_of(const Tensor& rows, std::int64_t batch, const BatchPiece& p);

// The ranks a norm's statistics are merged over: a group norm's per sample
// (the ranks holding the same samples), a batch norm's over the batch too.
struct Reductions {
  norm::ReductionPlan group, batch;
  Reductions(const DTensor& x)
      : group(norm::plan_reduction(norm::NormKind::Group, x.mesh(), x.placements())),
        batch(norm::plan_reduction(norm::NormKind::Batch, x.mesh(), x.placements())) {}
  const norm::ReductionPlan& of(const Layer& l) const { return l.batch ? batch : group; }
};

// The norm kernels' view of a norm's input `t` (over the layer's range).
kernels::NormLayout layout_over(const Layer& l, const Tensor& t);

// The forward runs the batch in two pieces when its norms' statistics cross
// ranks: one piece's statistics travel while the other piece's convolution
// runs, so of a chain's 2 x (norms) waits only the last piece's last one is
// left (a group norm's statistics are per sample, so the pieces' are the
// whole batch's). Every rank of a reduction group holds the same samples,
// so all cut the batch alike. A batch norm's statistics span the samples:
// a chain with one in training runs the batch whole.
std::vector<BatchPiece> batch_pieces(const Chain& c, const Reductions& reductions,
                                     std::int64_t batch);

// The operators' handlers (halo_chain_forward.cpp, halo_chain_backward.cpp).
std::vector<DTensor> forward_handler(OpCall& call);
std::vector<DTensor> backward_handler(OpCall& call);

}  // namespace dtensor::halo::chain
