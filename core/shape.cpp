#include "dtensor/core/shape.h"

#include <charconv>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "dtensor/core/errors.h"

namespace dtensor {

namespace {
// a * b, or InvalidArgument when it does not fit: shapes come from users
// (and command lines), and an overflowing product is undefined behaviour.
std::int64_t checked_mul(std::int64_t a, std::int64_t b, const Shape& s) {
  std::int64_t r = 0;
  DTENSOR_CHECK_ARG(!__builtin_mul_overflow(a, b, &r), "core",
                    "shape {}: the number of elements does not fit in 64 bits", fmt::join(s, "x"));
  return r;
}
}  // namespace

std::int64_t shape_numel(const Shape& s) {
  std::int64_t n = 1;
  for (auto e : s)
    n = checked_mul(n, e, s);
  return n;
}

Shape contiguous_strides(const Shape& s) {
  Shape st(s.size());
  std::int64_t acc = 1;
  for (std::size_t i = s.size(); i-- > 0;) {
    st[i] = acc;
    acc = checked_mul(acc, std::max<std::int64_t>(s[i], 1), s);
  }
  return st;
}

std::string shape_str(const Shape& s) {
  return fmt::format("[{}]", fmt::join(s, ", "));
}

std::int64_t normalize_dim(std::int64_t dim, std::int64_t ndim, const char* what) {
  const std::int64_t d = dim < 0 ? dim + ndim : dim;
  check_arg(d >= 0 && d < ndim, "core", "{}: dim {} is out of range for a tensor of rank {}", what,
            dim, ndim);
  return d;
}

Shape parse_int_list(const std::string& text, const char* what, char sep) {
  Shape out;
  check_arg(!text.empty(), "core", "{}: expected a list of integers, got an empty string", what);
  std::size_t pos = 0;
  while (pos <= text.size()) {
    std::size_t end = text.find(sep, pos);
    if (end == std::string::npos) end = text.size();
    const char* b = text.data() + pos;
    const char* e = text.data() + end;
    std::int64_t v = 0;
    auto [p, ec] = std::from_chars(b, e, v);
    check_arg(ec == std::errc() && p == e && b != e, "core",
              "{}: '{}' is not a list of integers separated by '{}'", what, text, sep);
    out.push_back(v);
    pos = end + 1;
  }
  return out;
}

}  // namespace dtensor
