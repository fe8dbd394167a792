// The kernel slots of the losses (mse_loss, cross_entropy with class
// probability or class-index targets, the pointwise losses), forward and
// backward. ops/ plans the placements, divides by the mean's denominator
// and reduces the ranks' partial sums; these do the arithmetic on one rank's
// shard.
//
// input and target are contiguous, of one shape, of the slot's dtype and
// device. A forward's result is this shard's sum as a 0-d f64 CPU tensor
// whatever the dtype and device (one number, reduced across ranks on the
// host), summed in the data's type in blocks and across blocks in f64, so a
// long f32 sum stays as exact as a short one.
#pragma once

#include "dtensor/core/errors.h"
#include "dtensor/core/tensor.h"
#include "dtensor/ops/kernel.h"
#include "dtensor/ops/kernels/pointwise_loss_terms.h"

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

/// cross_entropy with class-index targets: input [N, C, d1, ...] (the
/// slot's dtype), target [N, d1, ...] of I64 class indices. A position whose
/// target t is not ignore_index and lies in [0, C) contributes, with s the
/// label smoothing,
///   (1 - s) * (lse - x_t) + s / C * sum_c (lse - x_c)   (lse: log-sum-exp over c);
/// any other position (ignore_index, or an index out of range, which the
/// operator refuses after counting them: loss.class_index_count) contributes
/// nothing. sum = this shard's sum of the contributions.
struct CrossEntropyIndicesArgs {
  Tensor input, target;
  std::int64_t ignore_index = -100;
  double label_smoothing = 0.0;
  Tensor sum;  // out, 0-d f64 CPU
};
/// grad_input = scale * (softmax(input, dim 1) - ((1 - s) * onehot(t) + s / C))
/// at the contributing positions, 0 elsewhere (scale: grad / the mean's count).
struct CrossEntropyIndicesBackwardArgs {
  Tensor input, target;
  std::int64_t ignore_index = -100;
  double label_smoothing = 0.0;
  double scale = 1.0;
  Tensor grad_input;  // out
};
/// Counts a target of I64 class indices (any shape) against `classes`:
/// counts = [positions that contribute (not ignore_index, in [0, classes)),
/// positions out of range (neither), the smallest and the largest index out
/// of range] as a [4] f64 CPU tensor; the last two are +inf and -inf when
/// none is out of range.
struct ClassIndexCountArgs {
  Tensor target;
  std::int64_t classes = 1;
  std::int64_t ignore_index = -100;
  Tensor counts;  // out, [4] f64 CPU
};

/// The ranks' records of a cross_entropy_indices call merged into one, on
/// the host: each record is 5 f64 (the shard's loss sum, the positions that
/// contribute, those out of range, the smallest and the largest index out of
/// range, +inf and -inf for none); `all` holds every member's in rank order
/// ([members * 5]), `out` ([5]) their sums, minimum and maximum, merged in
/// that order so that every rank holds the same bits. Registered for the
/// CPU and f64 only, and run there for every device.
struct ClassIndexRecordsMergeArgs {
  /// A record's fields, in order (the operator writes them, the kernel merges them).
  enum Field : std::int64_t { kSum, kCounted, kOutOfRange, kSmallest, kLargest, kFields };
  Tensor all;
  Tensor out;  // out, [5] f64 CPU
};

// PointwiseLoss and the losses' per-element formulas: pointwise_loss_terms.h.
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
inline constexpr KernelSlot<CrossEntropyIndicesArgs> kCrossEntropyIndices{
    "loss.cross_entropy_indices"};
inline constexpr KernelSlot<CrossEntropyIndicesBackwardArgs> kCrossEntropyIndicesBackward{
    "loss.cross_entropy_indices_backward"};
/// Registered for the target's dtype, I64.
inline constexpr KernelSlot<ClassIndexCountArgs> kClassIndexCount{"loss.class_index_count"};
/// Registered for f64 on the CPU (the records' dtype and device).
inline constexpr KernelSlot<ClassIndexRecordsMergeArgs> kClassIndexRecordsMerge{
    "loss.class_index_records_merge"};
inline constexpr KernelSlot<PointwiseLossArgs> kPointwiseLoss{"loss.pointwise"};
inline constexpr KernelSlot<PointwiseLossBackwardArgs> kPointwiseLossBackward{
    "loss.pointwise_backward"};

/// Writes a loss's sum into the slot's 0-d f64 CPU tensor `out`
/// (InvalidArgument naming `slot` when it is not one).
inline void put_loss_sum(const Tensor& out, double value, const char* slot) {
  DTENSOR_CHECK_ARG(
      out.dtype() == DType::F64 && out.numel() == 1 && out.device().type == DeviceType::CPU, slot,
      "internal: the sum goes into a 0-d f64 CPU tensor, got {} {}", dtype_name(out.dtype()),
      shape_str(out.shape()));
  Tensor(out).data<double>()[0] = value;
}
/// InvalidArgument naming `slot` unless `target` has input's shape (what every
/// backend's kernel of an element-wise loss checks first).
inline void check_target_shape(const Tensor& input, const Tensor& target, const char* slot) {
  DTENSOR_CHECK_ARG(input.shape() == target.shape(), slot, "internal: target {} for an input {}",
                    shape_str(target.shape()), shape_str(input.shape()));
}
/// InvalidArgument naming `slot` unless `target` is a contiguous I64 tensor of
/// input's shape without dim 1, on input's device (what every backend's
/// class-index kernel checks first).
inline void check_class_index_target(const Tensor& input, const Tensor& target, const char* slot) {
  Shape expected = input.shape();
  if (expected.size() >= 2) expected.erase(expected.begin() + 1);
  DTENSOR_CHECK_ARG(input.dim() >= 2 && target.dtype() == DType::I64 &&
                        target.shape() == expected && target.is_contiguous() &&
                        target.device() == input.device(),
                    slot, "internal: target {} {} for an input {}", dtype_name(target.dtype()),
                    shape_str(target.shape()), shape_str(input.shape()));
}
/// The same for loss.class_index_count's target and its [4] f64 CPU counts.
inline void check_class_index_count(const ClassIndexCountArgs& a) {
  DTENSOR_CHECK_ARG(a.target.dtype() == DType::I64 && a.target.is_contiguous() &&
                        a.counts.dtype() == DType::F64 && a.counts.numel() == 4 &&
                        a.counts.is_contiguous() && a.counts.device().type == DeviceType::CPU,
                    kClassIndexCount.name,
                    "internal: a contiguous i64 target ({} given) into a [4] f64 CPU tensor",
                    dtype_name(a.target.dtype()));
}

}  // namespace dtensor::kernels
