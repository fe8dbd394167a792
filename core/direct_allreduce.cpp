#include "dtensor/core/direct_allreduce.h"

#include "core/detail/direct_collectives.h"
#include "core/detail/reduce_kernels.h"
#include "dtensor/core/dtype.h"

namespace dtensor {

bool fits_direct_allreduce(const ProcessGroup& group, std::uint64_t bytes, DeviceType device) {
  return device == DeviceType::CPU && group.matches_by_tag(device) &&
         detail::allreduce_runs_direct(bytes, group.size());
}

bool fits_direct_allreduce(const ProcessGroup& group, const Tensor& t) {
  return fits_direct_allreduce(group, t.nbytes(), t.device().type);
}

DirectAllreduce::DirectAllreduce(ProcessGroup& group, Tensor t, ReduceOp op, int tag)
    : DirectAllreduce(group.rank(), group.size(), std::move(t), op, [&](const P2POp& m) {
        return m.kind == P2POp::Kind::Recv ? group.irecv(m.tensor, m.peer, tag)
                                           : group.isend(m.tensor, m.peer, tag);
      }) {}

DirectAllreduce::DirectAllreduce(int rank, int size, Tensor t, ReduceOp op, const Post& post)
    : t_(std::move(t)), op_(op), rank_(rank), size_(size) {
  const std::int64_t n = t_.numel();
  all_ = Tensor::empty({n * size_}, t_.dtype());
  for (int q = 0; q < size_; ++q)
    if (q != rank_) works_.push_back(post(P2POp::recv(all_.narrow(0, q * n, n), q)));
  for (int q = 0; q < size_; ++q)
    if (q != rank_) works_.push_back(post(P2POp::send(t_, q)));
}

Tensor DirectAllreduce::finish() {
  wait_all(works_);
  works_.clear();
  const std::int64_t n = t_.numel();
  all_.narrow(0, rank_ * n, n).copy_(t_.view({n}));
  visit_dtype(t_.dtype(), [&](auto tag) {
    using T = decltype(tag);
    detail::reduce_blocks<T>(op_, all_.data<T>(), static_cast<std::size_t>(size_),
                             static_cast<std::size_t>(n), static_cast<std::size_t>(n),
                             t_.data<T>());
  });
  return t_;
}

}  // namespace dtensor
