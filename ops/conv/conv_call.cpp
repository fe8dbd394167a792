#include "ops/conv/conv_call.h"

#include "dtensor/core/errors.h"

namespace dtensor::conv {

std::vector<OpArg> encode_params(const ConvParams& p) {
  IntList pad;
  for (auto [l, r] : p.padding) {
    pad.push_back(l);
    pad.push_back(r);
  }
  return {IntList(p.stride), pad, IntList(p.dilation), p.groups};
}

ConvParams decode_params(const OpSchema& s, std::size_t first) {
  ConvParams p;
  p.stride = s.int_list(first);
  const IntList& pad = s.int_list(first + 1);
  check_arg(pad.size() % 2 == 0, "conv", "{}: padding must hold (left, right) pairs", s.op());
  p.padding.clear();
  for (std::size_t i = 0; i < pad.size(); i += 2)
    p.padding.emplace_back(pad[i], pad[i + 1]);
  p.dilation = s.int_list(first + 2);
  p.groups = s.int_value(first + 3);
  return p;
}

std::vector<OpArg> encode_mask(const ConvOutputMask& m) {
  return {IntList{m.input ? 1 : 0, m.weight ? 1 : 0, m.bias ? 1 : 0}};
}

ConvOutputMask decode_mask(const OpSchema& s, std::size_t pos) {
  const IntList& m = s.int_list(pos);
  check_arg(m.size() == 3, "conv", "{}: the output mask has 3 flags", s.op());
  return {m[0] != 0, m[1] != 0, m[2] != 0};
}

}  // namespace dtensor::conv
