// The pointwise losses' term and slope (d term / d input) of one element,
// PyTorch's formulas, written once for every backend: the CPU kernels run
// them in vectorised loops (backends/cpu/pointwise_loss_kernels.cpp), the
// CUDA kernels one thread per element (backends/cuda/loss.cu). x is the
// input, t the target, p smooth_l1's beta or huber's delta. smooth_l1 with
// beta 0 is l1 (PyTorch takes that branch too, so the slope at d = 0 is 0,
// not 0 / 0): effective_loss() picks it. Plain C++17, so nvcc compiles it.
#pragma once

#include <cmath>

#include "dtensor/ops/kernels/optim_update.h"  // DTENSOR_ELEMENT_FN

namespace dtensor::kernels {

/// The pointwise losses: one term per element of input - target.
enum class PointwiseLoss { L1, SmoothL1, Huber, BceWithLogits };

template <PointwiseLoss L, typename C>
struct PointwiseTerm;

template <typename C>
struct PointwiseTerm<PointwiseLoss::L1, C> {
  DTENSOR_ELEMENT_FN static C term(C x, C t, C /*p*/) { return std::abs(x - t); }
  DTENSOR_ELEMENT_FN static C slope(C x, C t, C /*p*/) {
    const C d = x - t;
    return static_cast<C>((d > 0) - (d < 0));
  }
};

template <typename C>
struct PointwiseTerm<PointwiseLoss::SmoothL1, C> {
  DTENSOR_ELEMENT_FN static C term(C x, C t, C beta) {
    const C a = std::abs(x - t);
    return a < beta ? C(0.5) * a * a / beta : a - C(0.5) * beta;
  }
  DTENSOR_ELEMENT_FN static C slope(C x, C t, C beta) {
    const C d = x - t;
    return d < -beta ? C(-1) : d > beta ? C(1) : d / beta;
  }
};

template <typename C>
struct PointwiseTerm<PointwiseLoss::Huber, C> {
  DTENSOR_ELEMENT_FN static C term(C x, C t, C delta) {
    const C a = std::abs(x - t);
    return a < delta ? C(0.5) * a * a : delta * (a - C(0.5) * delta);
  }
  DTENSOR_ELEMENT_FN static C slope(C x, C t, C delta) {
    const C d = x - t;
    return d < -delta ? -delta : d > delta ? delta : d;
  }
};

// max(x, 0) - x t + log1p(exp(-|x|)): no exp of a positive number, so no
// overflow for large |x|; the slope is sigmoid(x) - t.
template <typename C>
struct PointwiseTerm<PointwiseLoss::BceWithLogits, C> {
  DTENSOR_ELEMENT_FN static C term(C x, C t, C /*p*/) {
    return (x < C(0) ? C(0) : x) - x * t + std::log1p(std::exp(-std::abs(x)));  // std::max(x, 0)
  }
  DTENSOR_ELEMENT_FN static C slope(C x, C t, C /*p*/) { return C(1) / (C(1) + std::exp(-x)) - t; }
};

/// smooth_l1 with beta 0 runs as l1.
template <typename C>
DTENSOR_ELEMENT_FN PointwiseLoss effective_loss(PointwiseLoss l, C p) {
  return l == PointwiseLoss::SmoothL1 && p == C(0) ? PointwiseLoss::L1 : l;
}

}  // namespace dtensor::kernels
