#include "core/detail/bruck_allgather_plan.h"

#include <algorithm>

#include "dtensor/core/errors.h"

namespace dtensor::detail {

int bruck_rounds(int size) {
  int rounds = 0;
  for (int d = 1; d < size; d *= 2)
    ++rounds;
  return rounds;
}

BruckAllgatherPlan plan_bruck_allgather(int rank, const std::vector<std::int64_t>& counts) {
  const int size = static_cast<int>(counts.size());
  check_arg(size >= 1 && rank >= 0 && rank < size, "allgather",
            "rank {} of a group of {}: out of range", rank, size);
  for (int q = 0; q < size; ++q)
    check_arg(counts[static_cast<std::size_t>(q)] >= 0, "allgather", "counts[{}] = {} is negative",
              q, counts[static_cast<std::size_t>(q)]);
  BruckAllgatherPlan plan;
  // position[j]: where the j-th block of the rotated order (rank + j) starts.
  std::vector<std::int64_t> position(static_cast<std::size_t>(size) + 1, 0);
  for (int j = 0; j < size; ++j)
    position[static_cast<std::size_t>(j) + 1] =
        position[static_cast<std::size_t>(j)] + counts[static_cast<std::size_t>((rank + j) % size)];
  plan.rotated_offset.assign(static_cast<std::size_t>(size) + 1, position.back());
  for (int q = 0; q < size; ++q)
    plan.rotated_offset[static_cast<std::size_t>(q)] =
        position[static_cast<std::size_t>((q - rank + size) % size)];
  for (int d = 1; d < size; d *= 2) {
    const auto n = static_cast<std::size_t>(std::min(d, size - d));  // blocks this round moves
    const auto first = static_cast<std::size_t>(d);                  // the first one it receives
    BruckRound r;
    r.send_to = (rank - d + size) % size;
    r.recv_from = (rank + d) % size;
    r.send_lo = position[0];
    r.send_hi = position[n];
    r.recv_lo = position[first];
    r.recv_hi = position[first + n];
    plan.rounds.push_back(r);
  }
  return plan;
}

}  // namespace dtensor::detail
