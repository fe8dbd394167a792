#include "dtensor/ops/op_schema.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "dtensor/core/errors.h"

namespace dtensor {
namespace {

const char* arg_kind(const OpArg& a) {
  static const char* names[] = {"None", "DTensor", "Tensor", "int list",
                                "int",  "double",  "bool",   "string"};
  return names[a.index()];
}

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
  std::size_t h = std::hash<std::string>()(k.op) ^ (std::hash<std::string>()(k.rest) << 1);
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
      key_.rest += "D;";
    } else {
      key_.rest += describe(args_[i]) + ";";
    }
  }
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
