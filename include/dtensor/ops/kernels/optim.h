// The kernel slots of the optimisers' updates (torch.optim's single-tensor
// formulas, operation for operation) and of gradient clipping. nn/ keeps the
// state, the parameter groups and the placements; these do the arithmetic
// on one rank's shard, in place.
//
// Every tensor of one call is contiguous, of the slot's dtype and device and
// of one shape. The hyper-parameters are doubles, converted to the data's
// type where PyTorch multiplies a tensor by a Python float (which it also
// does in the tensor's type), so f64 results equal PyTorch's to rounding.
#pragma once

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <optional>

#include "dtensor/core/errors.h"
#include "dtensor/core/tensor.h"
#include "dtensor/ops/kernel.h"
#include "dtensor/ops/kernels/optim_update.h"

namespace dtensor::kernels {

/// torch.optim.SGD: g = grad + weight_decay * param; with a momentum buffer
/// buf = fresh_buffer ? g : momentum * buf + (1 - dampening) * g and
/// g = nesterov ? g + momentum * buf : buf; then param -= lr * g.
struct SgdArgs {
  Tensor param;                           // in, out
  Tensor grad;                            // in
  std::optional<Tensor> momentum_buffer;  // in, out; none without momentum
  bool fresh_buffer = false;              // the first step with momentum: buf = g
  double lr = 0, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
};

/// torch.optim.Adam and AdamW at step `step` (from 1): weight decay added to
/// the gradient, or decoupled (param *= 1 - lr * weight_decay); the moments
/// exp_avg, exp_avg_sq; with amsgrad max_exp_avg_sq = max(max_exp_avg_sq,
/// exp_avg_sq) normalises instead of exp_avg_sq.
struct AdamArgs {
  Tensor param;                          // in, out
  Tensor grad;                           // in
  Tensor exp_avg, exp_avg_sq;            // in, out
  std::optional<Tensor> max_exp_avg_sq;  // in, out; amsgrad only
  double lr = 0, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
  bool decoupled_weight_decay = false;
  std::int64_t step = 1;
};

/// torch.optim.RMSprop: square_avg = alpha * square_avg + (1 - alpha) g^2;
/// centered: grad_avg = alpha * grad_avg + (1 - alpha) g and the average is
/// sqrt(square_avg - grad_avg^2), else sqrt(square_avg); plus eps. With a
/// momentum buffer buf = momentum * buf + g / avg and param -= lr * buf,
/// else param -= lr * g / avg.
struct RmspropArgs {
  Tensor param;                           // in, out
  Tensor grad;                            // in
  Tensor square_avg;                      // in, out
  std::optional<Tensor> grad_avg;         // in, out; centered only
  std::optional<Tensor> momentum_buffer;  // in, out; momentum > 0 only
  double lr = 0, alpha = 0.99, eps = 1e-8, weight_decay = 0, momentum = 0;
};

/// The shard's part of a p-norm: sum |x|^p (p = 2: the sum of squares), or
/// max |x| for p = infinity, as a 0-d f64 CPU tensor whatever the dtype and
/// device (summed in the data's type in blocks and across blocks in f64).
/// An empty shard gives 0.
struct NormPartArgs {
  Tensor input;
  double norm_type = 2;
  Tensor result;  // out, 0-d f64 CPU
};

/// tensor *= scale, in place (the scale rounded to the data's type first,
/// as PyTorch's mul_ by a 0-d tensor of that type does).
struct ScaleInPlaceArgs {
  Tensor tensor;  // in, out
  double scale = 1;
};

inline constexpr KernelSlot<SgdArgs> kSgd{"optim.sgd"};
inline constexpr KernelSlot<AdamArgs> kAdam{"optim.adam"};
inline constexpr KernelSlot<RmspropArgs> kRmsprop{"optim.rmsprop"};
inline constexpr KernelSlot<NormPartArgs> kNormPart{"optim.norm_part"};
inline constexpr KernelSlot<ScaleInPlaceArgs> kScaleInPlace{"optim.scale_in_place"};

// ---- what every backend's update kernels share (the elements: optim_update.h) ----

/// InvalidArgument naming the slot unless `t` (the operand `what`) has the
/// parameter's shape, dtype and device and is contiguous.
inline void check_update_operand(const char* slot, const char* what, const Tensor& t,
                                 const Tensor& param) {
  DTENSOR_CHECK_ARG(t.shape() == param.shape() && t.dtype() == param.dtype() &&
                        t.device() == param.device() && t.is_contiguous(),
                    slot, "internal: {} is {} {}, the parameter {} {} (both contiguous)", what,
                    shape_str(t.shape()), dtype_name(t.dtype()), shape_str(param.shape()),
                    dtype_name(param.dtype()));
}
inline void check_update_operand(const char* slot, const char* what, const std::optional<Tensor>& t,
                                 const Tensor& param) {
  if (t) check_update_operand(slot, what, *t, param);
}
inline void check_update_operands(const SgdArgs& a) {
  check_update_operand(kSgd.name, "param", a.param, a.param);
  check_update_operand(kSgd.name, "grad", a.grad, a.param);
  check_update_operand(kSgd.name, "momentum_buffer", a.momentum_buffer, a.param);
}
inline void check_update_operands(const AdamArgs& a) {
  check_update_operand(kAdam.name, "param", a.param, a.param);
  check_update_operand(kAdam.name, "grad", a.grad, a.param);
  check_update_operand(kAdam.name, "exp_avg", a.exp_avg, a.param);
  check_update_operand(kAdam.name, "exp_avg_sq", a.exp_avg_sq, a.param);
  check_update_operand(kAdam.name, "max_exp_avg_sq", a.max_exp_avg_sq, a.param);
  check_arg(a.step >= 1, kAdam.name, "internal: step {} (steps count from 1)", a.step);
}
inline void check_update_operands(const RmspropArgs& a) {
  check_update_operand(kRmsprop.name, "param", a.param, a.param);
  check_update_operand(kRmsprop.name, "grad", a.grad, a.param);
  check_update_operand(kRmsprop.name, "square_avg", a.square_avg, a.param);
  check_update_operand(kRmsprop.name, "grad_avg", a.grad_avg, a.param);
  check_update_operand(kRmsprop.name, "momentum_buffer", a.momentum_buffer, a.param);
}

/// An optional state tensor's data, or null when the settings do not have it
/// (as the element functions of optim_update.h take it).
template <typename T>
T* state_data(const std::optional<Tensor>& t) {
  return t ? t->data<T>() : nullptr;
}

/// InvalidArgument naming the slot unless the norm part's input is contiguous
/// and its result a 0-d f64 CPU tensor.
inline void check_norm_part(const NormPartArgs& a) {
  check_arg(a.input.is_contiguous(), kNormPart.name, "internal: the input is not contiguous");
  DTENSOR_CHECK_ARG(a.result.dtype() == DType::F64 && a.result.numel() == 1 &&
                        a.result.device().type == DeviceType::CPU,
                    kNormPart.name,
                    "internal: the result goes into a 0-d f64 CPU tensor, got {} {}",
                    dtype_name(a.result.dtype()), shape_str(a.result.shape()));
}

/// The scalars of one update in the data's type, as torch computes them.
template <typename T>
SgdScalars<T> sgd_scalars(const SgdArgs& a) {
  return {static_cast<T>(a.lr),
          static_cast<T>(a.momentum),
          static_cast<T>(1 - a.dampening),
          static_cast<T>(a.weight_decay),
          a.weight_decay != 0,
          a.fresh_buffer,
          a.nesterov};
}
template <typename T>
AdamScalars<T> adam_scalars(const AdamArgs& a) {
  // Python floats, as torch computes them before touching a tensor.
  const double bc1 = 1 - std::pow(a.beta1, static_cast<double>(a.step));
  const double bc2 = 1 - std::pow(a.beta2, static_cast<double>(a.step));
  return {static_cast<T>(a.beta1),
          static_cast<T>(1 - a.beta1),
          static_cast<T>(a.beta2),
          static_cast<T>(1 - a.beta2),
          static_cast<T>(a.weight_decay),
          static_cast<T>(1 - a.lr * a.weight_decay),
          static_cast<T>(std::sqrt(bc2)),
          static_cast<T>(a.eps),
          static_cast<T>(-(a.lr / bc1)),
          !a.decoupled_weight_decay && a.weight_decay != 0,
          a.decoupled_weight_decay && a.weight_decay != 0};
}
template <typename T>
RmspropScalars<T> rmsprop_scalars(const RmspropArgs& a) {
  return {static_cast<T>(a.alpha), static_cast<T>(1 - a.alpha), static_cast<T>(a.weight_decay),
          static_cast<T>(a.eps),   static_cast<T>(a.momentum),  static_cast<T>(-a.lr),
          a.weight_decay != 0};
}

}  // namespace dtensor::kernels
