// The output mask of the weighted operators' backward calls (which of the
// input, weight and bias gradients to compute) as one typed-call argument:
// {input, weight, bias} flags.
#pragma once

#include "dtensor/ops/convolution.h"
#include "dtensor/ops/typed_call.h"

namespace dtensor {

template <>
struct ArgCodec<ConvOutputMask> {
  using Arg = const ConvOutputMask&;
  static constexpr std::size_t width = 1;
  static void encode(std::vector<OpArg>& out, const ConvOutputMask& m) {
    out.emplace_back(IntList{m.input ? 1 : 0, m.weight ? 1 : 0, m.bias ? 1 : 0});
  }
  static ConvOutputMask decode(const OpSchema& s, std::size_t at, std::string_view field) {
    const IntList& m = detail::call_arg<IntList>(s, at, field, "an int list");
    DTENSOR_CHECK_ARG(m.size() == 3, "dispatch", "{}: {}: the output mask has 3 flags", s.op(),
                      field);
    return {m[0] != 0, m[1] != 0, m[2] != 0};
  }
};

}  // namespace dtensor
