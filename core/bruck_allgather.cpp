#include "core/detail/bruck_allgather.h"

#include "core/detail/bruck_allgather_plan.h"

namespace dtensor::detail {

void bruck_allgather(int rank, const Tensor& in, const Tensor& out,
                     const std::vector<std::int64_t>& counts, const DirectAllreduce::Post& post) {
  const BruckAllgatherPlan plan = plan_bruck_allgather(rank, counts);
  const std::int64_t total = plan.rotated_offset.back();
  const std::int64_t mine = counts[static_cast<std::size_t>(rank)];
  // The blocks in rotated order, this rank's first.
  Tensor rotated = Tensor::empty({total}, out.dtype());
  if (mine > 0) rotated.narrow(0, 0, mine).copy_(in.view({mine}));
  for (const BruckRound& r : plan.rounds) {
    std::vector<std::shared_ptr<Work>> works;
    if (r.recv_hi > r.recv_lo)
      works.push_back(
          post(P2POp::recv(rotated.narrow(0, r.recv_lo, r.recv_hi - r.recv_lo), r.recv_from)));
    if (r.send_hi > r.send_lo)
      works.push_back(
          post(P2POp::send(rotated.narrow(0, r.send_lo, r.send_hi - r.send_lo), r.send_to)));
    wait_all(works);
  }
  // Out of rotated order: what precedes rank 0's block in the buffer (ranks
  // rank .. P-1) ends `out`, the rest (ranks 0 .. rank-1) leads it.
  const Tensor flat = out.view({total});
  const std::int64_t from_mine = plan.rotated_offset[0];
  const std::int64_t before = total - from_mine;
  if (from_mine > 0) flat.narrow(0, before, from_mine).copy_(rotated.narrow(0, 0, from_mine));
  if (before > 0) flat.narrow(0, 0, before).copy_(rotated.narrow(0, from_mine, before));
}

}  // namespace dtensor::detail
