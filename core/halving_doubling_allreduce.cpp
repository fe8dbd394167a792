#include "core/detail/halving_doubling_allreduce.h"

#include <algorithm>
#include <type_traits>

#include "core/detail/halving_doubling_plan.h"
#include "core/detail/reduce_kernels.h"
#include "dtensor/core/dtype.h"

namespace dtensor::detail {
namespace {

// own[i] = op(other[i], own[i]) (other_first) or op(own[i], other[i]): the
// op chosen once, outside the loop, so that the sums of f32 and f64 run in
// vector lanes (a buffer here is up to the gradients' size).
template <typename T>
void combine_into(ReduceOp op, T* own, const T* other, std::int64_t n, bool other_first) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    if (op == ReduceOp::Sum || op == ReduceOp::Avg) {  // a + b == b + a, bit for bit
      for (std::int64_t i = 0; i < n; ++i)
        own[i] += other[i];
      return;
    }
  }
  for (std::int64_t i = 0; i < n; ++i)
    own[i] = other_first ? combine(op, other[i], own[i]) : combine(op, own[i], other[i]);
}

}  // namespace

void halving_doubling_allreduce(int rank, int size, Tensor& t, ReduceOp op,
                                const DirectAllreduce::Post& post) {
  const std::int64_t n = t.numel();
  const Tensor flat = t.view({n});
  const auto steps = plan_halving_doubling(rank, size, n);
  std::int64_t most = 0;  // the largest range combined: received into `theirs` first
  for (const auto& s : steps)
    if (s.combine) most = std::max(most, s.recv_hi - s.recv_lo);
  const Tensor theirs = Tensor::empty({most}, t.dtype());
  for (const auto& s : steps) {
    const std::int64_t nrecv = s.recv_hi - s.recv_lo, nsend = s.send_hi - s.send_lo;
    const Tensor mine = flat.narrow(0, s.recv_lo, nrecv);
    std::vector<std::shared_ptr<Work>> works;
    if (nrecv > 0)
      works.push_back(post(P2POp::recv(s.combine ? theirs.narrow(0, 0, nrecv) : mine, s.peer)));
    if (nsend > 0) works.push_back(post(P2POp::send(flat.narrow(0, s.send_lo, nsend), s.peer)));
    wait_all(works);
    if (!s.combine || nrecv == 0) continue;
    visit_dtype(t.dtype(), [&](auto tag) {
      using T = decltype(tag);
      combine_into<T>(op, mine.data<T>(), theirs.data<T>(), nrecv, s.peer_first);
    });
  }
  if (op == ReduceOp::Avg)
    visit_dtype(t.dtype(), [&](auto tag) {
      using T = decltype(tag);
      divide_in_place<T>(flat.data<T>(), static_cast<std::size_t>(n), size);
    });
}

}  // namespace dtensor::detail
