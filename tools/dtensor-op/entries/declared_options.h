// Reading the options a row declares for itself (OpEntry::declared_options)
// from Options::declared: typed, the row's default when the option was not
// given, and a usage error naming the option when its text is not a value of
// its type. A row calls these in its `check` (so that a bad value fails
// before any rank talks) and wherever it needs the value.
#pragma once

#include <string_view>

#include "tools/cli/value_reader.h"
#include "tools/dtensor-op/options.h"

namespace dtensor::op_cli::entries {

/// Whether the declared option `name` was given (a flag: whether it is set).
inline bool declared_given(const Options& o, std::string_view name) {
  return o.declared.find(name) != o.declared.end();
}

/// A finite number, or `fallback` when not given.
inline double declared_number(const Options& o, std::string_view name, double fallback) {
  const auto it = o.declared.find(name);
  return it == o.declared.end() ? fallback : cli::ValueReader{true}.number(name, it->second);
}

}  // namespace dtensor::op_cli::entries
