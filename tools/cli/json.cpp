#include "tools/cli/json.h"

#include <cmath>

namespace dtensor::cli {
namespace {

// One line without spaces; a string that is not UTF-8 gets U+FFFD, no exception.
std::string dump(const JsonValue& v) {
  return v.dump(-1, ' ', false, JsonValue::error_handler_t::replace);
}

// A whole number below 1e16 is stored as an integer so that it is written
// without ".0" ("536" bytes, not "536.0"); any other double is written by
// nlohmann in a form that reads back to the same double (non-finite: null).
JsonValue number_value(double v) {
  if (std::isfinite(v) && v == std::trunc(v) && std::fabs(v) < 1e16 && !(v == 0 && std::signbit(v)))
    return static_cast<std::int64_t>(v);
  return v;
}

}  // namespace

std::string JsonObject::quote(const std::string& s) {
  return dump(JsonValue(s));
}

std::string JsonObject::number(double v) {
  return dump(number_value(v));
}

JsonObject& JsonObject::add(const std::string& key, double value) {
  value_[key] = number_value(value);
  return *this;
}
JsonObject& JsonObject::add(const std::string& key, std::int64_t value) {
  value_[key] = value;
  return *this;
}
JsonObject& JsonObject::add(const std::string& key, std::uint64_t value) {
  value_[key] = value;
  return *this;
}
JsonObject& JsonObject::add(const std::string& key, bool value) {
  value_[key] = value;
  return *this;
}
JsonObject& JsonObject::add(const std::string& key, const std::string& value) {
  value_[key] = value;
  return *this;
}
JsonObject& JsonObject::add(const std::string& key, const std::vector<std::int64_t>& values) {
  value_[key] = values;
  return *this;
}
JsonObject& JsonObject::add(const std::string& key, const std::vector<std::string>& values) {
  value_[key] = values;
  return *this;
}
JsonObject& JsonObject::add(const std::string& key, const std::optional<double>& value) {
  value_[key] = value ? number_value(*value) : JsonValue(nullptr);
  return *this;
}
JsonObject& JsonObject::add(const std::string& key, const JsonObject& object) {
  value_[key] = object.value_;
  return *this;
}
JsonObject& JsonObject::add(const std::string& key, const JsonValue& value) {
  value_[key] = value;
  return *this;
}
JsonObject& JsonObject::add_null(const std::string& key) {
  value_[key] = nullptr;
  return *this;
}
JsonObject& JsonObject::add_raw(const std::string& key, const std::string& json) {
  value_[key] = JsonValue::parse(json);
  return *this;
}

std::string JsonObject::str() const {
  return dump(value_);
}

}  // namespace dtensor::cli
