// The kernel slots of the losses (mse_loss and cross_entropy with class
// probability targets), forward and backward. ops/ plans the placements,
// divides by the mean's denominator and reduces the ranks' partial sums;
// these do the arithmetic on one rank's shard.
//
// input and target are contiguous, of one shape, of the slot's dtype and
// device. A forward's result is this shard's sum as a 0-d f64 CPU tensor
// whatever the dtype and device (one number, reduced across ranks on the
// host), summed in the data's type in blocks and across blocks in f64, so a
// long f32 sum stays as exact as a short one.
#pragma once

#include "dtensor/core/tensor.h"
#include "dtensor/ops/kernel.h"

namespace dtensor::kernels {

/// sum = sum over elements of (input - target)^2.
struct MseLossArgs {
  Tensor input, target;
  Tensor sum;  // out, 0-d f64 CPU
};
/// grad_input = scale * (input - target) (scale: 2 * grad / denominator).
struct MseLossBackwardArgs {
  Tensor input, target;
  double scale = 1.0;
  Tensor grad_input;  // out
};
/// input and target [N, C, d1, ...], classes along dim 1:
/// sum = -sum target * log_softmax(input, dim 1).
struct CrossEntropyArgs {
  Tensor input, target;
  Tensor sum;  // out, 0-d f64 CPU
};
/// grad_input = scale * (softmax(input, dim 1) * sum_c target - target)
/// (scale: grad / denominator).
struct CrossEntropyBackwardArgs {
  Tensor input, target;
  double scale = 1.0;
  Tensor grad_input;  // out
};

/// The pointwise losses: one term per element of input - target.
enum class PointwiseLoss { L1, SmoothL1, Huber, BceWithLogits };
/// sum = sum over elements of the loss's term; `param` is smooth_l1's beta
/// or huber's delta (unused by the others).
struct PointwiseLossArgs {
  Tensor input, target;
  PointwiseLoss loss = PointwiseLoss::L1;
  double param = 1.0;
  Tensor sum;  // out, 0-d f64 CPU
};
/// grad_input = scale * d term / d input (scale: grad / denominator).
struct PointwiseLossBackwardArgs {
  Tensor input, target;
  PointwiseLoss loss = PointwiseLoss::L1;
  double param = 1.0;
  double scale = 1.0;
  Tensor grad_input;  // out
};

inline constexpr KernelSlot<MseLossArgs> kMseLoss{"loss.mse"};
inline constexpr KernelSlot<MseLossBackwardArgs> kMseLossBackward{"loss.mse_backward"};
inline constexpr KernelSlot<CrossEntropyArgs> kCrossEntropy{"loss.cross_entropy"};
inline constexpr KernelSlot<CrossEntropyBackwardArgs> kCrossEntropyBackward{
    "loss.cross_entropy_backward"};
inline constexpr KernelSlot<PointwiseLossArgs> kPointwiseLoss{"loss.pointwise"};
inline constexpr KernelSlot<PointwiseLossBackwardArgs> kPointwiseLossBackward{
    "loss.pointwise_backward"};

}  // namespace dtensor::kernels
