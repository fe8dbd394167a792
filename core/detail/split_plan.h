// Where one rank stands in a collective split of a group into disjoint
// subgroups (ProcessGroup::split_groups): which subgroup, and its rank there.
// Pure index arithmetic, so the rules are unit-tested without any backend.
#pragma once

#include <vector>

namespace dtensor::detail {

struct SplitMembership {
  int group = -1;  // index into the list of groups; -1: in none
  int rank = -1;   // rank inside that group (its position in the list)
};

/// Validates `groups` against a group of `size` ranks — each list non-empty and
/// strictly increasing, ranks in [0, size), no rank in two lists — and finds
/// `rank`. InvalidArgument naming `groups` otherwise. Every rank runs the same
/// check on the same lists, so all of them accept or all refuse.
SplitMembership split_membership(const std::vector<std::vector<int>>& groups, int rank, int size);

}  // namespace dtensor::detail
