#include "core/detail/halving_doubling_plan.h"

#include "dtensor/core/errors.h"

namespace dtensor::detail {

int power_of_two_at_most(int size) {
  int p = 1;
  while (p <= size / 2)
    p *= 2;
  return p;
}

int halving_doubling_rounds(int size) {
  const int p = power_of_two_at_most(size);
  int steps = 0;
  for (int d = 1; d < p; d *= 2)
    ++steps;
  return 2 * steps + (p == size ? 0 : 2);
}

double halving_doubling_share(int size) {
  const int p = power_of_two_at_most(size);
  return 2.0 * (p - 1) / p + (p == size ? 0.0 : 2.0);
}

std::vector<HalvingDoublingStep> plan_halving_doubling(int rank, int size, std::int64_t n) {
  check_arg(size >= 1 && rank >= 0 && rank < size, "allreduce",
            "rank {} of a group of {}: out of range", rank, size);
  check_arg(n >= 0, "allreduce", "element count {} is negative", n);
  const int p = power_of_two_at_most(size);
  const int folded = size - p;  // pairs (2k, 2k + 1), k < folded, that act as one
  std::vector<HalvingDoublingStep> steps;
  const auto whole = [&](int peer, bool send) {
    HalvingDoublingStep s;
    s.peer = peer;
    (send ? s.send_hi : s.recv_hi) = n;
    return s;
  };
  if (rank < 2 * folded && rank % 2 == 0) {  // hands its part to rank + 1, gets the result back
    steps.push_back(whole(rank + 1, true));
    steps.push_back(whole(rank + 1, false));
    return steps;
  }
  if (rank < 2 * folded) {
    HalvingDoublingStep s = whole(rank - 1, false);
    s.combine = true;
    s.peer_first = true;
    steps.push_back(s);
  }
  // Virtual ranks 0 .. p-1: the odd rank of each folded pair, then the rest.
  const int v = rank < 2 * folded ? rank / 2 : rank - folded;
  const auto real = [&](int u) { return u < folded ? 2 * u + 1 : u + folded; };
  // Block b of the buffer: elements [b n / p, (b + 1) n / p).
  const auto bound = [&](int b) { return static_cast<std::int64_t>(b) * n / p; };
  int lo = 0, hi = p;  // the blocks this rank is responsible for
  for (int d = p / 2; d >= 1; d /= 2) {
    const int mid = lo + (hi - lo) / 2;
    const bool lower = (v & d) == 0;
    HalvingDoublingStep s;
    s.peer = real(v ^ d);
    s.send_lo = bound(lower ? mid : lo);
    s.send_hi = bound(lower ? hi : mid);
    (lower ? hi : lo) = mid;
    s.recv_lo = bound(lo);
    s.recv_hi = bound(hi);
    s.combine = true;
    s.peer_first = s.peer < rank;
    steps.push_back(s);
  }
  for (int d = 1; d < p; d *= 2) {
    const int len = hi - lo;
    const bool lower = (v & d) == 0;
    HalvingDoublingStep s;
    s.peer = real(v ^ d);
    s.send_lo = bound(lo);
    s.send_hi = bound(hi);
    (lower ? hi : lo) += lower ? len : -len;
    s.recv_lo = bound(lower ? hi - len : lo);
    s.recv_hi = bound(lower ? hi : lo + len);
    steps.push_back(s);
  }
  if (rank < 2 * folded) steps.push_back(whole(rank - 1, true));
  return steps;
}

}  // namespace dtensor::detail
