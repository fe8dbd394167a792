// Typed local kernels: the one place where the library's arithmetic on local
// tensors lives.
//
// A kernel slot is a name and the arguments struct its kernels take, declared
// once (`inline constexpr KernelSlot<MomentsArgs> kMoments{"norm.moments"}`).
// Backends register a function for a slot per (device, dtype) — the CPU
// backends from static registrars, the CUDA module when it is loaded — and
// ops/ runs it by the tensors' device and dtype, never looping over elements
// itself. The arguments struct carries the input and output tensors (the
// caller allocates the outputs) and whatever the kernel reads besides, so a
// slot's signature is one struct, as a Gloo collective takes one options
// struct. The same table holds the operators' default-path kernels
// (`register_kernel(op, device, dtype, LocalKernel)` in registry.h): one
// kernel model, looked up by (name, device, dtype).
//
// Users and new backends register kernels for the library's slots the same
// way (include/dtensor/ops/kernels/*.h list them), replacing a built-in one
// with `override_existing` (docs/custom-operators.md).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <typeindex>

#include "dtensor/core/dtype.h"
#include "dtensor/core/profile.h"

namespace dtensor {

/// A kernel slot: its name, and through Args the struct its kernels take.
template <typename Args>
struct KernelSlot {
  const char* name;
};

template <typename Args>
using KernelFunction = std::function<void(const Args&)>;

namespace detail {
/// The type-erased table behind register_kernel / run_kernel (ops/registry.cpp).
void register_typed_kernel(const std::string& name, DeviceType device, DType dtype,
                           std::type_index args, std::shared_ptr<const void> fn,
                           bool override_existing);
/// The function registered for (name, device, dtype) with arguments `args`;
/// NotSupported naming all three when there is none, InvalidArgument when
/// one was registered with another arguments type.
const void* typed_kernel(const std::string& name, DeviceType device, DType dtype,
                         std::type_index args);
/// Whether (name, device, dtype) has a kernel.
bool has_typed_kernel(const std::string& name, DeviceType device, DType dtype);
}  // namespace detail

/// Registers `fn` for `slot` on (device, dtype). Registering twice throws
/// InvalidArgument unless `override_existing` (which logs a warning).
template <typename Args>
void register_kernel(const KernelSlot<Args>& slot, DeviceType device, DType dtype,
                     KernelFunction<Args> fn, bool override_existing = false) {
  detail::register_typed_kernel(slot.name, device, dtype, std::type_index(typeid(Args)),
                                std::make_shared<const KernelFunction<Args>>(std::move(fn)),
                                override_existing);
}

/// The kernel registered for `slot` on (device, dtype). The reference stays
/// valid until the kernel is replaced or the slot's entry removed.
template <typename Args>
const KernelFunction<Args>& find_kernel(const KernelSlot<Args>& slot, DeviceType device,
                                        DType dtype) {
  return *static_cast<const KernelFunction<Args>*>(
      detail::typed_kernel(slot.name, device, dtype, std::type_index(typeid(Args))));
}

/// Runs the kernel of `slot` for (device, dtype) on `args` (timed under the
/// profile, dtensor/core/profile.h).
template <typename Args>
void run_kernel(const KernelSlot<Args>& slot, DeviceType device, DType dtype, const Args& args) {
  const KernelFunction<Args>& kernel = find_kernel(slot, device, dtype);
  const detail::KernelTimer timed(slot.name, device, dtype);
  kernel(args);
}

template <typename Args>
bool has_kernel(const KernelSlot<Args>& slot, DeviceType device, DType dtype) {
  return detail::has_typed_kernel(slot.name, device, dtype);
}

}  // namespace dtensor
