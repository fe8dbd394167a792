// Helpers shared by the communication tests: tensors whose values are a
// closed-form function of (rank, index), so every expected value is computed
// by formula, independently of the code under test.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <type_traits>
#include <vector>

#include "dtensor/core/process_group.h"
#include "dtensor/core/tensor.h"

namespace dtensor::testing {

inline const std::vector<DType> kAllDTypes = {DType::F32, DType::F64, DType::BF16, DType::F16};
inline const std::vector<ReduceOp> kAllOps = {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max,
                                              ReduceOp::Min};

/// A 1-D tensor with element i = f(i).
inline Tensor make_tensor(DType dt, std::int64_t n, const std::function<double(std::int64_t)>& f) {
  Tensor t = Tensor::empty({n}, dt);
  visit_dtype(dt, [&](auto tag) {
    using T = decltype(tag);
    T* p = t.data<T>();
    for (std::int64_t i = 0; i < n; ++i) {
      if constexpr (is_half_float_v<T>)
        p[i] = T(static_cast<float>(f(i)));
      else
        p[i] = static_cast<T>(f(i));
    }
  });
  return t;
}

/// Small integers: exact in bf16 (8 significant bits) and f16 (11) even summed
/// over 4 ranks.
inline double small_value(int rank, std::int64_t i) {
  return static_cast<double>((rank * 7 + i * 3) % 11) - 5.0 + rank;
}

/// Largest |t[i] - f(i)|.
inline double max_error(const Tensor& t, const std::function<double(std::int64_t)>& f) {
  double err = 0;
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    const double d = t.item_flat(i) - f(i);
    err = std::max(err, d < 0 ? -d : d);
  }
  return err;
}

/// Tolerance for a result of magnitude <= `scale` in dtype `dt`.
inline double tolerance(DType dt, double scale) {
  switch (dt) {
    case DType::F64:
      return 1e-12 * (1 + scale);
    case DType::F32:
      return 1e-5 * (1 + scale);
    case DType::BF16:
      return 1e-2 * (1 + scale);
    case DType::F16:
      return 2e-3 * (1 + scale);  // u = 2^-11, a few roundings
    case DType::I64:              // integers are exact
      return 0;
  }
  return 0;
}

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

struct CounterSnapshot {
  std::uint64_t sent, received, messages;
  static CounterSnapshot of(const ProcessGroup& pg) {
    return {pg.counters().bytes_sent.load(), pg.counters().bytes_received.load(),
            pg.counters().messages_sent.load()};
  }
  CounterSnapshot operator-(const CounterSnapshot& o) const {
    return {sent - o.sent, received - o.received, messages - o.messages};
  }
};

}  // namespace dtensor::testing
