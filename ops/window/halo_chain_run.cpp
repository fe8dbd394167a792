// What a halo chain's two handlers share (halo_chain_run.h).
#include "ops/window/halo_chain_run.h"

namespace dtensor::halo::chain {
namespace {

thread_local ChainState* t_state = nullptr;

}  // namespace

ChainState* current_state() {
  return t_state;
}

StateScope::StateScope(ChainState* s) : previous_(t_state) {
  t_state = s;
}

StateScope::~StateScope() {
  t_state = previous_;
}

Tensor local_or_none(const std::vector<DTensor>& in, int index) {
  return index < 0 ? Tensor() : in.at(static_cast<std::size_t>(index)).to_local().contiguous();
}

Tensor statistics_of(const Tensor& rows, std::int64_t batch, const BatchPiece& p) {
  // The whole batch's are all of them (a batch norm's are not per sample).
  if (p.begin == 0 && p.length == batch) return rows;
  const std::int64_t per_sample = batch > 0 ? rows.size(0) / batch : 0;
  return rows.narrow(0, p.begin * per_sample, p.length * per_sample);
}

kernels::NormLayout layout_over(const Layer& l, const Tensor& t) {
  return norm::layout_of(l.kind(), t.shape(), t.size(1), l.num_groups);
}

std::vector<BatchPiece> batch_pieces(const Chain& c, const Reductions& reductions,
                                     std::int64_t batch) {
  bool communicates = false;
  for (const Layer& l : c.layers) {
    if (!l.statistics()) continue;
    if (l.batch) return {{0, batch}};
    communicates = communicates || reductions.of(l).communicates();
  }
  if (!communicates || batch < 2) return {{0, batch}};
  return {{0, batch / 2}, {batch / 2, batch - batch / 2}};
}

}  // namespace dtensor::halo::chain
