#include "core/detail/backend_plan.h"

#include <fmt/format.h>

#include "core/detail/trim_spaces.h"
#include "dtensor/core/errors.h"

namespace dtensor::detail {
namespace {

constexpr const char* kGloo = "gloo";
constexpr const char* kNccl = "nccl";

}  // namespace

std::string BackendPlan::str() const {
  return routed() ? fmt::format("cpu:{},cuda:{}", cpu, cuda) : cpu;
}

BackendPlan plan_backends(std::string_view spec, int cuda_device_count) {
  spec = trim_spaces(spec);
  check_arg(!spec.empty(), "init", "backend: empty backend name");
  if (spec.find(':') == std::string_view::npos) {
    check_arg(spec.find(',') == std::string_view::npos, "init",
              "backend '{}': list devices as cpu:NAME,cuda:NAME", spec);
    // NCCL moves only device memory; CPU tensors (metadata, shapes) go over Gloo
    // in the same group, as PyTorch's "cpu:gloo,cuda:nccl" does.
    if (spec == kNccl) return {kGloo, kNccl};
    if (spec == "auto")
      return cuda_device_count > 0 ? BackendPlan{kGloo, kNccl} : BackendPlan{kGloo, ""};
    return {std::string(spec), ""};
  }
  BackendPlan plan{"", ""};
  std::string_view rest = spec;
  while (!rest.empty()) {
    const std::size_t comma = rest.find(',');
    const std::string_view item = trim_spaces(rest.substr(0, comma));
    rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
    const std::size_t colon = item.find(':');
    check_arg(colon != std::string_view::npos && colon > 0 && colon + 1 < item.size(), "init",
              "backend '{}': '{}' is not DEVICE:NAME", spec, item);
    const std::string_view dev = trim_spaces(item.substr(0, colon));
    const std::string name(trim_spaces(item.substr(colon + 1)));
    std::string* slot = dev == "cpu" ? &plan.cpu : dev == "cuda" ? &plan.cuda : nullptr;
    check_arg(slot != nullptr, "init", "backend '{}': unknown device '{}' (cpu or cuda)", spec,
              dev);
    check_arg(slot->empty(), "init", "backend '{}': device '{}' is named twice", spec, dev);
    *slot = name;
  }
  if (plan.cpu.empty()) plan.cpu = kGloo;
  check_arg(plan.cpu != kNccl, "init",
            "backend '{}': nccl cannot serve CPU tensors (use cpu:gloo,cuda:nccl)", spec);
  check_arg(plan.cuda.empty() || plan.cuda == kNccl || plan.cuda == plan.cpu, "init",
            "backend '{}': CUDA tensors go over nccl or, staged through host memory, over the "
            "CPU backend '{}'",
            spec, plan.cpu);
  return plan;
}

}  // namespace dtensor::detail
