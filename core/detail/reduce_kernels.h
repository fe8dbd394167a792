// Element-wise reductions shared by the CPU process groups (Gloo, MPI): the
// combine of two values, the local reduction that finishes a reduce-scatter,
// and Avg's division. bfloat16 and float16 are combined in float.
#pragma once

#include <algorithm>
#include <cstddef>
#include <type_traits>

#include "dtensor/core/dtype.h"
#include "dtensor/core/process_group.h"

// GCC's own attribute; clang (and so clang-tidy) has no such option.
#if defined(__GNUC__) && !defined(__clang__)
#define DTENSOR_VECTORISED __attribute__((optimize("vect-cost-model=dynamic")))
#else
#define DTENSOR_VECTORISED
#endif

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

/// out[i] = f(out[i], in[i]) for n elements: one operation a loop, no
/// branch inside, so that it runs at memory speed (an all-reduce's gradients
/// pass through it every step). `out` and `in` do not overlap.
/// (GCC's cost model at -O2 vectorises only loops without a remainder; this
/// one is worth its remainder.)
template <typename T, typename F>
DTENSOR_VECTORISED void fold_into(T* __restrict out, const T* __restrict in, std::size_t n, F f) {
  for (std::size_t i = 0; i < n; ++i)
    out[i] = f(out[i], in[i]);
}

/// out[i] = (op over q of blocks[q][i]) for `nblocks` blocks of n elements
/// laid out `stride` elements apart; Avg divides by `nblocks`. The blocks are
/// combined in order 0, 1, ... for every element, as a loop over q inside
/// would. bfloat16 and float16 accumulate in float and round once at the
/// end, element by element; the others fold one block at a time into `out`,
/// which must not overlap the blocks.
template <typename T>
void reduce_blocks(ReduceOp op, const T* blocks, std::size_t nblocks, std::size_t stride,
                   std::size_t n, T* out) {
  using A = typename AccType<T>::type;
  if constexpr (!std::is_same_v<A, T>) {
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
  } else {
    std::copy(blocks, blocks + n, out);
    for (std::size_t q = 1; q < nblocks; ++q) {
      const T* in = blocks + q * stride;
      switch (op) {
        case ReduceOp::Max:
          fold_into(out, in, n, [](T a, T b) { return std::max(a, b); });
          break;
        case ReduceOp::Min:
          fold_into(out, in, n, [](T a, T b) { return std::min(a, b); });
          break;
        case ReduceOp::Sum:
        case ReduceOp::Avg:
          fold_into(out, in, n, [](T a, T b) { return a + b; });
          break;
      }
    }
    if (op == ReduceOp::Avg) {
      const auto count = static_cast<T>(nblocks);
      for (std::size_t i = 0; i < n; ++i)
        out[i] = out[i] / count;
    }
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
