#include "core/detail/split_plan.h"

#include "dtensor/core/errors.h"

namespace dtensor::detail {

SplitMembership split_membership(const std::vector<std::vector<int>>& groups, int rank, int size) {
  check_arg(size >= 1, "core", "split_groups: the parent group has {} ranks", size);
  std::vector<int> owner(static_cast<std::size_t>(size), -1);
  SplitMembership me;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const auto& members = groups[g];
    check_arg(!members.empty(), "core", "split_groups: groups[{}] is empty", g);
    for (std::size_t i = 0; i < members.size(); ++i) {
      const int r = members[i];
      check_arg(r >= 0 && r < size, "core",
                "split_groups: groups[{}] holds rank {}, outside the group of {} ranks", g, r,
                size);
      check_arg(i == 0 || r > members[i - 1], "core",
                "split_groups: groups[{}] must be strictly increasing", g);
      auto& o = owner[static_cast<std::size_t>(r)];
      check_arg(o < 0, "core", "split_groups: rank {} is in groups[{}] and groups[{}]", r, o, g);
      o = static_cast<int>(g);
      if (r == rank) me = {static_cast<int>(g), static_cast<int>(i)};
    }
  }
  return me;
}

}  // namespace dtensor::detail
