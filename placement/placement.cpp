#include "dtensor/placement/placement.h"

#include <charconv>
#include <functional>

#include "dtensor/core/errors.h"

namespace dtensor {

Placement Placement::normalized(std::int64_t ndim) const {
  if (!is_shard()) return *this;
  return shard(normalize_dim(dim_, ndim, "Shard"));
}

std::size_t Placement::hash() const {
  std::size_t h = static_cast<std::size_t>(kind_) * 0x9e3779b97f4a7c15ull;
  if (is_shard()) h ^= std::hash<std::int64_t>()(dim_) + 0x632be59bd9b4e019ull + (h << 6);
  if (is_partial()) h ^= static_cast<std::size_t>(op_) + 0x85ebca6bull + (h << 6);
  return h;
}

std::string Placement::str() const {
  switch (kind_) {
    case Kind::Shard:
      return fmt::format("S({})", dim_);
    case Kind::Replicate:
      return "R";
    case Kind::Partial:
      return fmt::format("P({})", reduce_op_name(op_));
  }
  return "?";
}

std::string placements_str(const Placements& p) {
  std::string s;
  for (std::size_t i = 0; i < p.size(); ++i)
    s += (i ? "," : "") + p[i].str();
  return s;
}

namespace {
Placement parse_one(std::string tok, const std::string& text, const char* what) {
  auto fail = [&] {
    return InvalidArgument("placement",
                           fmt::format("{}: '{}' in '{}' is not a placement (expected S<dim>, "
                                       "S(<dim>), R, P or P(sum|avg|max|min))",
                                       what, tok, text));
  };
  if (tok == "R") return Replicate();
  if (tok == "P") return Partial();
  if (tok.size() > 3 && tok[0] == 'P' && tok[1] == '(' && tok.back() == ')') {
    const std::string op = tok.substr(2, tok.size() - 3);
    if (op == "sum") return Partial(ReduceOp::Sum);
    if (op == "avg") return Partial(ReduceOp::Avg);
    if (op == "max") return Partial(ReduceOp::Max);
    if (op == "min") return Partial(ReduceOp::Min);
    throw fail();
  }
  if (tok.size() >= 2 && tok[0] == 'S') {
    std::string num = tok.substr(1);
    if (num.size() >= 2 && num.front() == '(' && num.back() == ')')
      num = num.substr(1, num.size() - 2);
    std::int64_t d = 0;
    auto [p, ec] = std::from_chars(num.data(), num.data() + num.size(), d);
    if (ec == std::errc() && p == num.data() + num.size() && !num.empty()) return Shard(d);
  }
  throw fail();
}
}  // namespace

Placements parse_placements(const std::string& text, const char* what) {
  check_arg(!text.empty(), "placement", "{}: empty placement list", what);
  Placements out;
  std::size_t pos = 0;
  // Split on commas outside parentheses.
  int depth = 0;
  std::string tok;
  for (; pos <= text.size(); ++pos) {
    const char c = pos < text.size() ? text[pos] : ',';
    if (c == '(') ++depth;
    if (c == ')') --depth;
    if (c == ',' && (depth == 0 || pos == text.size())) {
      out.push_back(parse_one(tok, text, what));
      tok.clear();
    } else if (c != ' ') {
      tok += c;
    }
  }
  return out;
}

}  // namespace dtensor
