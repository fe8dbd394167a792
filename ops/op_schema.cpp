#include "dtensor/ops/op_schema.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <bit>
#include <cstring>

#include "dtensor/core/errors.h"

namespace dtensor {
namespace {

const char* arg_kind(const OpArg& a) {
  static const char* names[] = {"None", "DTensor", "Tensor", "int list",
                                "int",  "double",  "bool",   "string"};
  return names[a.index()];
}

// Appends argument `a` to a key's words (OpSchemaKey::rest): its kind, then
// its value, exactly (a double by its bits, a string by its bytes).
void encode(const OpArg& a, std::vector<std::uint64_t>& out) {
  out.push_back(a.index());
  std::visit(
      [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, Tensor>) {
          out.push_back(v.defined() ? 1 : 0);
          if (!v.defined()) return;
          out.push_back(static_cast<std::uint64_t>(v.dtype()));
          out.push_back(static_cast<std::uint64_t>(v.device().type));
          out.push_back(static_cast<std::uint64_t>(v.device().index));
          out.push_back(v.shape().size());
          for (const std::int64_t d : v.shape())
            out.push_back(static_cast<std::uint64_t>(d));
        } else if constexpr (std::is_same_v<T, IntList>) {
          out.push_back(v.size());
          for (const std::int64_t x : v)
            out.push_back(static_cast<std::uint64_t>(x));
        } else if constexpr (std::is_same_v<T, std::int64_t>) {
          out.push_back(static_cast<std::uint64_t>(v));
        } else if constexpr (std::is_same_v<T, double>) {
          out.push_back(std::bit_cast<std::uint64_t>(v));
        } else if constexpr (std::is_same_v<T, bool>) {
          out.push_back(v ? 1 : 0);
        } else if constexpr (std::is_same_v<T, std::string>) {
          out.push_back(v.size());
          for (std::size_t i = 0; i < v.size(); i += 8) {
            std::uint64_t w = 0;
            std::memcpy(&w, v.data() + i, std::min<std::size_t>(8, v.size() - i));
            out.push_back(w);
          }
        }
        // None and DTensor (whose spec is in the key's specs): the kind alone.
      },
      a);
}

// The text of an argument, for str() (messages and DTENSOR_DEBUG only).
std::string describe(const OpArg& a) {
  return std::visit(
      [](const auto& v) -> std::string {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, None>) return "None";
        if constexpr (std::is_same_v<T, DTensor>) return v.spec().str();
        if constexpr (std::is_same_v<T, Tensor>) return v.str();
        if constexpr (std::is_same_v<T, IntList>) return fmt::format("[{}]", fmt::join(v, ","));
        if constexpr (std::is_same_v<T, std::int64_t>) return fmt::format("{}", v);
        if constexpr (std::is_same_v<T, double>) return fmt::format("{:a}", v);  // exact
        if constexpr (std::is_same_v<T, bool>) return v ? "true" : "false";
        if constexpr (std::is_same_v<T, std::string>) return fmt::format("'{}'", v);
      },
      a);
}

}  // namespace

std::size_t OpSchemaKeyHash::operator()(const OpSchemaKey& k) const {
  std::size_t h = std::hash<std::string>()(k.op);
  for (const std::uint64_t w : k.rest)
    h = h * 1000003u ^ std::hash<std::uint64_t>()(w);
  for (auto& s : k.specs)
    h = h * 1000003u ^ s.hash();
  return h;
}

OpSchema::OpSchema(std::string op, std::vector<OpArg> args)
    : op_(std::move(op)), args_(std::move(args)) {
  key_.op = op_;
  for (std::size_t i = 0; i < args_.size(); ++i) {
    if (const auto* d = std::get_if<DTensor>(&args_[i])) {
      dtensor_pos_.push_back(i);
      key_.specs.push_back(d->spec());
    }
    encode(args_[i], key_.rest);
  }
}

const void* OpSchema::cached_call(const std::type_info& type) const {
  for (const auto& [t, call] : decoded_.entries)
    if (*t == type) return call.get();
  return nullptr;
}

void OpSchema::cache_call(const std::type_info& type, std::shared_ptr<const void> call) const {
  decoded_.entries.emplace_back(&type, std::move(call));
}

#define DTENSOR_OPARG_GET(T, what)                                                                \
  check_arg(i < args_.size(), "dispatch", "{}: argument {} is missing", op_, i);                  \
  const auto* v = std::get_if<T>(&args_[i]);                                                      \
  DTENSOR_CHECK_ARG(v != nullptr, "dispatch", "{}: argument {} must be {}, got {}", op_, i, what, \
                    arg_kind(args_[i]));                                                          \
  return *v

const DTensor& OpSchema::dtensor(std::size_t i) const {
  DTENSOR_OPARG_GET(DTensor, "a DTensor");
}
const Tensor& OpSchema::tensor(std::size_t i) const {
  DTENSOR_OPARG_GET(Tensor, "a Tensor");
}
const IntList& OpSchema::int_list(std::size_t i) const {
  DTENSOR_OPARG_GET(IntList, "an int list");
}
std::int64_t OpSchema::int_value(std::size_t i) const {
  DTENSOR_OPARG_GET(std::int64_t, "an int");
}
bool OpSchema::flag(std::size_t i) const {
  DTENSOR_OPARG_GET(bool, "a bool");
}
const std::string& OpSchema::text(std::size_t i) const {
  DTENSOR_OPARG_GET(std::string, "a string");
}
#undef DTENSOR_OPARG_GET

double OpSchema::scalar(std::size_t i) const {
  check_arg(i < args_.size(), "dispatch", "{}: argument {} is missing", op_, i);
  if (const auto* d = std::get_if<double>(&args_[i])) return *d;
  if (const auto* n = std::get_if<std::int64_t>(&args_[i])) return static_cast<double>(*n);
  throw InvalidArgument("dispatch", fmt::format("{}: argument {} must be a number, got {}", op_, i,
                                                arg_kind(args_[i])));
}

bool OpSchema::is_none(std::size_t i) const {
  return i >= args_.size() || std::holds_alternative<None>(args_[i]);
}
bool OpSchema::is_dtensor(std::size_t i) const {
  return i < args_.size() && std::holds_alternative<DTensor>(args_[i]);
}

std::vector<DTensorSpec> OpSchema::input_specs() const {
  return key_.specs;
}

const DeviceMesh& OpSchema::mesh() const {
  check_arg(!dtensor_pos_.empty(), "dispatch", "{}: no DTensor argument", op_);
  const DeviceMesh& m = std::get<DTensor>(args_[dtensor_pos_[0]]).mesh();
  for (auto p : dtensor_pos_)
    DTENSOR_CHECK_ARG(std::get<DTensor>(args_[p]).mesh() == m, "dispatch",
                      "{}: arguments {} and {} live on different meshes ({} vs {})", op_,
                      dtensor_pos_[0], p, m.str(), std::get<DTensor>(args_[p]).mesh().str());
  return m;
}

std::string OpSchema::str() const {
  std::string s = op_ + "(";
  for (std::size_t i = 0; i < args_.size(); ++i)
    s += (i ? ", " : "") + describe(args_[i]);
  return s + ")";
}

}  // namespace dtensor
