// How the ProcessGroup collectives with uneven counts become NCCL calls:
// NCCL's allgather / reduce-scatter want equal counts, and it has no
// all-to-all, so those go through grouped point-to-point calls (or one reduce
// per root). Pure index arithmetic, unit-tested without a GPU.
#pragma once

#include <cstdint>
#include <vector>

namespace dtensor::nccl_backend {

/// ncclCommSplit's arguments for one rank: color = the index of the list the
/// rank is in (kNoColor, i.e. NCCL_SPLIT_NOCOLOR, when in none), key = its rank
/// in that list, so the child's ranks are the list's order. Validates `groups`
/// (InvalidArgument naming it), identically on every rank.
struct SplitArgs {
  static constexpr int kNoColor = -1;  // NCCL_SPLIT_NOCOLOR (static_assert in the .cpp)
  int color = kNoColor;
  int key = 0;
  int size = 0;  // ranks in the child (0 without one)
};
SplitArgs plan_split(const std::vector<std::vector<int>>& groups, int rank, int parent_size);

struct Segment {
  int peer = 0;
  std::int64_t offset = 0;  // in elements, into the buffer the segment belongs to
  std::int64_t count = 0;
};

/// Grouped send/recv: what to send where, where to receive, and the part that
/// stays on this rank (a local device copy).
struct P2PPlan {
  std::vector<Segment> sends;  // offsets into the input
  std::vector<Segment> recvs;  // offsets into the output
  std::int64_t self_src = 0, self_dst = 0, self_count = 0;
};

/// Exclusive prefix sums.
std::vector<std::int64_t> offsets_of(const std::vector<std::int64_t>& counts);
bool all_equal(const std::vector<std::int64_t>& counts);

/// Allgather with uneven counts: send my block to everyone, receive block q
/// from q. Zero-count transfers are left out.
P2PPlan plan_allgather(int rank, const std::vector<std::int64_t>& counts);
P2PPlan plan_all_to_all(int rank, const std::vector<std::int64_t>& send_counts,
                        const std::vector<std::int64_t>& recv_counts);

/// Reduce-scatter: one ncclReduceScatter when counts are equal, else one
/// ncclReduce per root q of block q (in a group); `roots[q]` is that block.
struct ReduceScatterPlan {
  bool native = true;
  std::int64_t count = 0;  // native
  std::vector<Segment> roots;
};
ReduceScatterPlan plan_reduce_scatter(const std::vector<std::int64_t>& counts);

}  // namespace dtensor::nccl_backend
