// What the family files of the op table share: the usage error, the report's
// and meta.json's spelling of lists and paddings.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tools/cli/value_reader.h"
#include "tools/dtensor-op/op_table.h"

namespace dtensor::op_cli::entries {

using Int = std::int64_t;
using json = nlohmann::ordered_json;

using cli::fail;  // a usage error naming the option

/// "[1, 2]", as the report prints a list.
inline std::string list(const std::vector<Int>& v) {
  return shape_str(v);
}

/// "[(l, r), ...]", as the report prints a padding.
inline std::string pads(const ConvParams::Padding& padding) {
  std::string s;
  for (const auto& [l, r] : padding)
    s += fmt::format("{}({}, {})", s.empty() ? "" : ", ", l, r);
  return "[" + s + "]";
}

/// [[l, r], ...], as meta.json writes a padding.
inline json padding_pairs(const ConvParams::Padding& padding) {
  json out = json::array();
  for (const auto& [l, r] : padding)
    out.push_back({l, r});
  return out;
}

/// The pools' output shape from the options' kernel, stride, dilation,
/// padding and ceil_mode (PyTorch's formula, this tool's own arithmetic;
/// window_entries.cpp).
Shape pool_output(const Options& o);
/// The pools' rules on those options (PyTorch's): UsageError naming the
/// option. `padding_option` is the padding option the user gave.
void check_pool(const Options& o, const std::string& padding_option);

/// The backward of an op whose only gradient is the input's.
inline Grads input_grad(DTensor gx) {
  Grads g;
  g.grad_input = std::move(gx);
  return g;
}

inline std::string no_parameters(const Options&) {
  return "(no parameters)";
}

/// Product of s[first..].
inline Int prod_from(const Shape& s, std::size_t first) {
  Int p = 1;
  for (std::size_t i = first; i < s.size(); ++i)
    p *= s[i];
  return p;
}

}  // namespace dtensor::op_cli::entries
