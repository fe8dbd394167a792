#include "ops/conv/conv_call.h"

#include "dtensor/core/errors.h"

namespace dtensor::conv {
namespace {

PaddingMode padding_mode_from(const OpSchema& s, const std::string& name) {
  for (PaddingMode m :
       {PaddingMode::Zeros, PaddingMode::Reflect, PaddingMode::Replicate, PaddingMode::Circular})
    if (padding_mode_name(m) == name) return m;
  throw InvalidArgument("conv", fmt::format("padding_mode: {}: unknown mode '{}'", s.op(), name));
}

void append_params(std::vector<OpArg>& args, const ConvParams& p) {
  IntList pad;
  for (auto [l, r] : p.padding) {
    pad.push_back(l);
    pad.push_back(r);
  }
  args.emplace_back(IntList(p.stride));
  args.emplace_back(std::move(pad));
  args.emplace_back(IntList(p.dilation));
  args.emplace_back(p.groups);
  args.emplace_back(std::string(padding_mode_name(p.padding_mode)));
}

ConvParams read_params(const OpSchema& s, std::size_t first) {
  ConvParams p;
  p.stride = s.int_list(first);
  const IntList& pad = s.int_list(first + 1);
  DTENSOR_CHECK_ARG(pad.size() % 2 == 0, "conv", "{}: padding must hold (left, right) pairs",
                    s.op());
  p.padding.clear();
  for (std::size_t i = 0; i < pad.size(); i += 2)
    p.padding.emplace_back(pad[i], pad[i + 1]);
  p.dilation = s.int_list(first + 2);
  p.groups = s.int_value(first + 3);
  p.padding_mode = padding_mode_from(s, s.text(first + 4));
  return p;
}

}  // namespace

ForwardCall ForwardCall::decode(const OpSchema& s) {
  return {s.dtensor(0), s.dtensor(1), s.is_dtensor(2), read_params(s, 3)};
}

std::vector<OpArg> ForwardCall::encode(const DTensor& input, const DTensor& weight,
                                       const std::optional<DTensor>& bias,
                                       const ConvParams& expanded) {
  std::vector<OpArg> args{input, weight};
  args.push_back(bias ? OpArg(*bias) : OpArg(None{}));
  append_params(args, expanded);
  return args;
}

BackwardCall BackwardCall::decode(const OpSchema& s) {
  const IntList& m = s.int_list(8);
  DTENSOR_CHECK_ARG(m.size() == 3, "conv", "{}: the output mask has 3 flags", s.op());
  return {s.dtensor(0), s.dtensor(1), s.dtensor(2), read_params(s, 3),
          ConvOutputMask{m[0] != 0, m[1] != 0, m[2] != 0}};
}

std::vector<OpArg> BackwardCall::encode(const DTensor& grad_output, const DTensor& input,
                                        const DTensor& weight, const ConvParams& expanded,
                                        const ConvOutputMask& mask) {
  std::vector<OpArg> args{grad_output, input, weight};
  append_params(args, expanded);
  args.emplace_back(IntList{mask.input ? 1 : 0, mask.weight ? 1 : 0, mask.bias ? 1 : 0});
  return args;
}

}  // namespace dtensor::conv
