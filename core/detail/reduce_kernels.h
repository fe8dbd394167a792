// Element-wise reductions shared by the CPU process groups (Gloo, MPI): the
// combine of two values, the local reduction that finishes a reduce-scatter,
// and Avg's division. bfloat16 and float16 are combined in float.
#pragma once

#include <algorithm>
#include <cstddef>

#include "dtensor/core/dtype.h"
#include "dtensor/core/process_group.h"

namespace dtensor::detail {

/// The type arithmetic is done in: bfloat16 and float16 are widened to float
/// so each combine rounds once.
template <typename T>
struct AccType {
  using type = T;
};
template <>
struct AccType<BFloat16> {
  using type = float;
};
template <>
struct AccType<Float16> {
  using type = float;
};

template <typename T>
typename AccType<T>::type widen(T v) {
  return static_cast<typename AccType<T>::type>(v);
}

/// Avg is a Sum here; the caller divides afterwards.
template <typename T>
T combine(ReduceOp op, T a, T b) {
  const auto x = widen(a), y = widen(b);
  switch (op) {
    case ReduceOp::Max:
      return T(std::max(x, y));
    case ReduceOp::Min:
      return T(std::min(x, y));
    case ReduceOp::Sum:
    case ReduceOp::Avg:
      break;
  }
  return T(x + y);
}

/// out[i] = (op over q of blocks[q][i]) for `nblocks` blocks of n elements
/// laid out `stride` elements apart; Avg divides by `nblocks`.
template <typename T>
void reduce_blocks(ReduceOp op, const T* blocks, std::size_t nblocks, std::size_t stride,
                   std::size_t n, T* out) {
  using A = typename AccType<T>::type;
  for (std::size_t i = 0; i < n; ++i) {
    A acc = widen(blocks[i]);
    for (std::size_t q = 1; q < nblocks; ++q) {
      const A v = widen(blocks[q * stride + i]);
      acc = (op == ReduceOp::Max)   ? std::max(acc, v)
            : (op == ReduceOp::Min) ? std::min(acc, v)
                                    : acc + v;
    }
    if (op == ReduceOp::Avg) acc = acc / static_cast<A>(nblocks);
    out[i] = T(acc);
  }
}

/// t[i] /= divisor, in place (the second half of Avg).
template <typename T>
void divide_in_place(T* t, std::size_t n, double divisor) {
  using A = typename AccType<T>::type;
  for (std::size_t i = 0; i < n; ++i)
    t[i] = T(widen(t[i]) / static_cast<A>(divisor));
}

}  // namespace dtensor::detail
