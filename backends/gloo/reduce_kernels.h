// The combine functions handed to gloo::allreduce (Gloo has none for
// bfloat16, and its float16 type is not dtensor::Float16), over the shared
// element-wise reductions of core/detail/reduce_kernels.h.
#pragma once

#include <cstddef>
#include <functional>

#include "core/detail/reduce_kernels.h"

namespace dtensor::gloo_backend {

using detail::combine;
using detail::divide_in_place;
using detail::reduce_blocks;

/// The signature gloo::AllreduceOptions::setReduceFunction wants: c = a (op) b.
using GlooReduceFn = std::function<void(void*, const void*, const void*, std::size_t)>;

template <typename T>
GlooReduceFn gloo_reduce_fn(ReduceOp op) {
  return [op](void* c, const void* a, const void* b, std::size_t n) {
    T* out = static_cast<T*>(c);
    const T* x = static_cast<const T*>(a);
    const T* y = static_cast<const T*>(b);
    for (std::size_t i = 0; i < n; ++i)
      out[i] = combine<T>(op, x[i], y[i]);
  };
}

}  // namespace dtensor::gloo_backend
