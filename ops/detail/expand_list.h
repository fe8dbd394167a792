// "One entry for every spatial dim or one per dim": how every operator's
// parameter lists (stride, padding, kernel, ...) are spelled out for the
// input's spatial dims, with the error every front end gives for a list of
// the wrong length.
#pragma once

#include <cstdint>
#include <vector>

#include "dtensor/core/errors.h"

namespace dtensor::detail {

/// `v` spelled out for `n` dims: empty -> n x `dflt`, one entry -> n copies,
/// n entries -> as is; InvalidArgument naming `name` (for `what`, e.g. "a
/// pool") otherwise.
template <typename T>
std::vector<T> expand_list(const std::vector<T>& v, std::int64_t n, const T& dflt, const char* name,
                           const char* component, const char* what) {
  if (v.empty()) return std::vector<T>(static_cast<std::size_t>(n), dflt);
  if (v.size() == 1) return std::vector<T>(static_cast<std::size_t>(n), v[0]);
  DTENSOR_CHECK_ARG(
      static_cast<std::int64_t>(v.size()) == n, component,
      "{}: {} values given for {} with {} spatial dims (the input's dims after N and C): "
      "give one value, or one per spatial dim",
      name, v.size(), what, n);
  return v;
}

}  // namespace dtensor::detail
