#include "ops/conv/conv_call.h"

#include "dtensor/core/errors.h"

namespace dtensor {

void ArgCodec<ConvParams>::encode(std::vector<OpArg>& out, const ConvParams& p) {
  out.emplace_back(IntList(p.stride));
  ArgCodec<ConvParams::Padding>::encode(out, p.padding);
  out.emplace_back(IntList(p.dilation));
  out.emplace_back(p.groups);
  out.emplace_back(std::string(padding_mode_name(p.padding_mode)));
}

ConvParams ArgCodec<ConvParams>::decode(const OpSchema& s, std::size_t at, std::string_view) {
  ConvParams p;
  p.stride = detail::call_arg<IntList>(s, at, "stride", "an int list");
  p.padding = ArgCodec<ConvParams::Padding>::decode(s, at + 1, "padding");
  p.dilation = detail::call_arg<IntList>(s, at + 2, "dilation", "an int list");
  p.groups = detail::call_arg<std::int64_t>(s, at + 3, "groups", "an int");
  const std::string& mode = detail::call_arg<std::string>(s, at + 4, "padding_mode", "a string");
  for (PaddingMode m :
       {PaddingMode::Zeros, PaddingMode::Reflect, PaddingMode::Replicate, PaddingMode::Circular})
    if (padding_mode_name(m) == mode) {
      p.padding_mode = m;
      return p;
    }
  throw InvalidArgument("conv", fmt::format("padding_mode: {}: unknown mode '{}'", s.op(), mode));
}

}  // namespace dtensor
