#include "backends/nccl/collective_plan.h"

#include <nccl.h>

#include <algorithm>

#include "core/detail/split_plan.h"

namespace dtensor::nccl_backend {

static_assert(SplitArgs::kNoColor == NCCL_SPLIT_NOCOLOR, "SplitArgs::kNoColor must be NCCL's");

SplitArgs plan_split(const std::vector<std::vector<int>>& groups, int rank, int parent_size) {
  const detail::SplitMembership m = detail::split_membership(groups, rank, parent_size);
  if (m.group < 0) return {};
  return {m.group, m.rank, static_cast<int>(groups[static_cast<std::size_t>(m.group)].size())};
}

std::vector<std::int64_t> offsets_of(const std::vector<std::int64_t>& counts) {
  std::vector<std::int64_t> off(counts.size(), 0);
  for (std::size_t i = 1; i < counts.size(); ++i)
    off[i] = off[i - 1] + counts[i - 1];
  return off;
}

bool all_equal(const std::vector<std::int64_t>& counts) {
  return std::adjacent_find(counts.begin(), counts.end(), std::not_equal_to<>()) == counts.end();
}

P2PPlan plan_allgather(int rank, const std::vector<std::int64_t>& counts) {
  P2PPlan plan;
  const auto off = offsets_of(counts);
  const std::size_t me = static_cast<std::size_t>(rank);
  for (std::size_t q = 0; q < counts.size(); ++q) {
    if (q == me) continue;
    if (counts[me] > 0) plan.sends.push_back({static_cast<int>(q), 0, counts[me]});
    if (counts[q] > 0) plan.recvs.push_back({static_cast<int>(q), off[q], counts[q]});
  }
  plan.self_src = 0;
  plan.self_dst = off[me];
  plan.self_count = counts[me];
  return plan;
}

P2PPlan plan_all_to_all(int rank, const std::vector<std::int64_t>& send_counts,
                        const std::vector<std::int64_t>& recv_counts) {
  P2PPlan plan;
  const auto soff = offsets_of(send_counts), roff = offsets_of(recv_counts);
  const std::size_t me = static_cast<std::size_t>(rank);
  for (std::size_t q = 0; q < send_counts.size(); ++q) {
    if (q == me) continue;
    if (send_counts[q] > 0) plan.sends.push_back({static_cast<int>(q), soff[q], send_counts[q]});
    if (recv_counts[q] > 0) plan.recvs.push_back({static_cast<int>(q), roff[q], recv_counts[q]});
  }
  plan.self_src = soff[me];
  plan.self_dst = roff[me];
  plan.self_count = send_counts[me];
  return plan;
}

ReduceScatterPlan plan_reduce_scatter(const std::vector<std::int64_t>& counts) {
  ReduceScatterPlan plan;
  if (all_equal(counts)) {
    plan.count = counts.empty() ? 0 : counts[0];
    return plan;
  }
  plan.native = false;
  const auto off = offsets_of(counts);
  for (std::size_t q = 0; q < counts.size(); ++q)
    plan.roots.push_back({static_cast<int>(q), off[q], counts[q]});
  return plan;
}

}  // namespace dtensor::nccl_backend
