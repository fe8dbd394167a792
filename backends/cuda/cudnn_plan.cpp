#include "backends/cuda/cudnn_plan.h"

#include <algorithm>
#include <limits>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "dtensor/core/errors.h"

namespace dtensor::cuda_backend {
namespace {

int to_int(std::int64_t v, const char* what) {
  check_arg(v >= 0 && v <= std::numeric_limits<int>::max(), "cudnn",
            "{} {} does not fit cuDNN's int", what, v);
  return static_cast<int>(v);
}

}  // namespace

bool CudnnConvPlan::needs_prepad() const {
  return std::any_of(prepad.begin(), prepad.end(),
                     [](const auto& p) { return p.first != 0 || p.second != 0; });
}

std::string CudnnConvPlan::key(ConvPass pass, DType dtype, int device) const {
  return fmt::format("{}|{}|{}|x{}|w{}|y{}|p{}|s{}|d{}|g{}", static_cast<int>(pass),
                     dtype_name(dtype), device, x, w, y, pad, stride, dilation, groups);
}

CudnnConvPlan plan_cudnn_conv(const Shape& input, const Shape& weight, const ConvParams& p) {
  const std::size_t sd = input.size() - 2;
  check_arg(sd >= 1 && sd <= 3 && weight.size() == input.size() && p.stride.size() == sd &&
                p.padding.size() == sd && p.dilation.size() == sd,
            "cudnn", "plan: expected NC(D)HW operands and expanded parameters");
  CudnnConvPlan plan;
  plan.padded_input = input;
  plan.groups = to_int(p.groups, "groups");
  std::vector<std::int64_t> pad(sd);
  for (std::size_t i = 0; i < sd; ++i) {
    const auto [l, r] = p.padding[i];
    const std::int64_t m = std::min(l, r);
    pad[i] = m;
    plan.prepad.emplace_back(l - m, r - m);
    plan.padded_input[2 + i] += (l - m) + (r - m);
  }
  Shape out{input[0], weight[0]};
  for (std::size_t i = 0; i < sd; ++i)
    out.push_back(conv_output_length(input[2 + i], weight[2 + i], p.stride[i], p.dilation[i],
                                     p.padding[i].first, p.padding[i].second));

  plan.promoted_1d = sd == 1;
  plan.x = plan.padded_input;
  plan.w = weight;
  plan.y = out;
  if (plan.promoted_1d) {
    // N C W -> N C 1 W: a unit height, kernel height 1, no padding there.
    plan.x.insert(plan.x.begin() + 2, 1);
    plan.w.insert(plan.w.begin() + 2, 1);
    plan.y.insert(plan.y.begin() + 2, 1);
    plan.pad.push_back(0);
    plan.stride.push_back(1);
    plan.dilation.push_back(1);
  }
  for (std::size_t i = 0; i < sd; ++i) {
    plan.pad.push_back(to_int(pad[i], "padding"));
    plan.stride.push_back(to_int(p.stride[i], "stride"));
    plan.dilation.push_back(to_int(p.dilation[i], "dilation"));
  }
  for (auto v : plan.x)
    to_int(v, "input extent");
  return plan;
}

}  // namespace dtensor::cuda_backend
