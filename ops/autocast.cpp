// Autocast's per-thread state, its policy table and the casting of a call's
// arguments (dtensor/ops/autocast.h). dispatch() asks for the arguments
// before anything else, so the casts are recorded as the call's inputs.
#include "dtensor/ops/autocast.h"

#include <mutex>
#include <shared_mutex>
#include <unordered_map>

#include "dtensor/core/errors.h"
#include "dtensor/ops/dtype_cast.h"

namespace dtensor {
namespace {

thread_local bool enabled = false;
thread_local DType lower = DType::BF16;

// torch.autocast's CPU lists, for the operators the library has: the
// lower-precision list (convolutions, linear), the fp32 list (losses,
// normalisations, the sums, means and variances; softmax and log_softmax
// are composed of operators, their sum among them) and the promote list
// (cat and the binary arithmetic).
struct PolicyTable {
  std::shared_mutex mutex;
  std::unordered_map<std::string, AutocastPolicy> by_op{
      {"convolution", AutocastPolicy::LowerPrecision},
      {"conv_transpose", AutocastPolicy::LowerPrecision},
      {"linear", AutocastPolicy::LowerPrecision},
      {"batch_norm", AutocastPolicy::Float32},
      {"group_norm", AutocastPolicy::Float32},
      {"instance_norm", AutocastPolicy::Float32},
      {"layer_norm", AutocastPolicy::Float32},
      {"mse_loss", AutocastPolicy::Float32},
      {"cross_entropy", AutocastPolicy::Float32},
      {"cross_entropy_indices", AutocastPolicy::Float32},  // the i64 target stays
      {"l1_loss", AutocastPolicy::Float32},
      {"smooth_l1_loss", AutocastPolicy::Float32},
      {"huber_loss", AutocastPolicy::Float32},
      {"binary_cross_entropy_with_logits", AutocastPolicy::Float32},
      {"sum", AutocastPolicy::Float32},
      {"mean", AutocastPolicy::Float32},
      {"sum_dims", AutocastPolicy::Float32},
      {"mean_dims", AutocastPolicy::Float32},
      {"var", AutocastPolicy::Float32},
      {"cat", AutocastPolicy::Widest},
      {"add", AutocastPolicy::Widest},
      {"sub", AutocastPolicy::Widest},
      {"mul", AutocastPolicy::Widest},
      {"div", AutocastPolicy::Widest},
      {"maximum", AutocastPolicy::Widest},
      {"minimum", AutocastPolicy::Widest},
  };
};

PolicyTable& table() {
  static PolicyTable t;
  return t;
}

bool is_lower(DType t) {
  return t == DType::BF16 || t == DType::F16;
}

// f64 > f32 > the 16-bit types.
int width(DType t) {
  return t == DType::F64 ? 2 : t == DType::F32 ? 1 : 0;
}

// The dtype argument `x` is cast to under `policy`, given the widest
// floating dtype among the call's arguments.
DType target(AutocastPolicy policy, DType x, DType widest) {
  switch (policy) {
    case AutocastPolicy::LowerPrecision:
      return x == DType::F32 ? lower : x;
    case AutocastPolicy::Float32:
      return is_lower(x) ? DType::F32 : x;
    case AutocastPolicy::Widest:
      return widest;
    case AutocastPolicy::None:
      break;
  }
  return x;
}

}  // namespace

AutocastScope::AutocastScope(bool on, DType dtype)
    : previous_enabled_(enabled), previous_dtype_(lower) {
  DTENSOR_CHECK_ARG(is_lower(dtype), "autocast", "dtype: {} is not a lower precision (bf16 or f16)",
                    dtype_name(dtype));
  enabled = on;
  if (on) lower = dtype;
}

AutocastScope::~AutocastScope() {
  enabled = previous_enabled_;
  lower = previous_dtype_;
}

bool autocast_enabled() {
  return enabled;
}

DType autocast_dtype() {
  return lower;
}

AutocastPolicy autocast_policy(const std::string& op) {
  auto& t = table();
  std::shared_lock lock(t.mutex);
  const auto it = t.by_op.find(op);
  return it == t.by_op.end() ? AutocastPolicy::None : it->second;
}

void set_autocast_policy(const std::string& op, AutocastPolicy policy) {
  auto& t = table();
  std::unique_lock lock(t.mutex);
  t.by_op[op] = policy;
}

namespace detail {

std::vector<OpArg> autocast_arguments(const std::string& op, std::vector<OpArg> args) {
  if (!enabled) return args;
  const AutocastPolicy policy = autocast_policy(op);
  if (policy == AutocastPolicy::None) return args;
  DType widest = DType::BF16;
  bool any = false;
  for (const OpArg& a : args)
    if (const auto* d = std::get_if<DTensor>(&a)) {
      if (!any || width(d->dtype()) > width(widest)) widest = d->dtype();
      any = true;
    }
  for (OpArg& a : args)
    if (auto* d = std::get_if<DTensor>(&a)) {
      const DType want = target(policy, d->dtype(), widest);
      // Two 16-bit types of different kinds are left for the operator to
      // refuse: neither is wider.
      if (want != d->dtype() &&
          !(is_lower(want) && is_lower(d->dtype()) && policy == AutocastPolicy::Widest))
        *d = to(*d, want);
    }
  return args;
}

AutocastSuspended::AutocastSuspended() : previous_(enabled) {
  enabled = false;
}

AutocastSuspended::~AutocastSuspended() {
  enabled = previous_;
}

}  // namespace detail
}  // namespace dtensor
