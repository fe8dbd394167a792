// The output mask of the backward calls of the weighted operators and the
// normalisations (which of the input, weight and bias gradients to compute)
// as one typed-call argument: {input, weight, bias} flags.
#pragma once

#include "dtensor/ops/convolution.h"
#include "dtensor/ops/normalization.h"
#include "dtensor/ops/typed_call.h"

namespace dtensor {

/// A mask struct with `input`, `weight`, `bias` flags as one int list.
template <class Mask>
struct OutputMaskCodec {
  using Arg = const Mask&;
  static constexpr std::size_t width = 1;
  static void encode(std::vector<OpArg>& out, const Mask& m) {
    out.emplace_back(IntList{m.input ? 1 : 0, m.weight ? 1 : 0, m.bias ? 1 : 0});
  }
  static Mask decode(const OpSchema& s, std::size_t at, std::string_view field) {
    const IntList& m = detail::call_arg<IntList>(s, at, field, "an int list");
    DTENSOR_CHECK_ARG(m.size() == 3, "dispatch", "{}: {}: the output mask has 3 flags", s.op(),
                      field);
    return {m[0] != 0, m[1] != 0, m[2] != 0};
  }
};

template <>
struct ArgCodec<ConvOutputMask> : OutputMaskCodec<ConvOutputMask> {};
template <>
struct ArgCodec<NormOutputMask> : OutputMaskCodec<NormOutputMask> {};

}  // namespace dtensor
