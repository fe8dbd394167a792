#include "tools/dtensor-conv/json.h"

#include <cmath>

#include <fmt/format.h>

namespace dtensor::conv_cli {

std::string JsonObject::quote(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20)
          out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
        else
          out += c;
    }
  }
  return out + "\"";
}

std::string JsonObject::number(double v) {
  // Shortest round-trip form; "1e-07" and "3" are valid JSON numbers.
  return std::isfinite(v) ? fmt::format("{}", v) : "null";
}

JsonObject& JsonObject::add(const std::string& key, double value) {
  return add_raw(key, number(value));
}
JsonObject& JsonObject::add(const std::string& key, std::int64_t value) {
  return add_raw(key, std::to_string(value));
}
JsonObject& JsonObject::add(const std::string& key, std::uint64_t value) {
  return add_raw(key, std::to_string(value));
}
JsonObject& JsonObject::add(const std::string& key, bool value) {
  return add_raw(key, value ? "true" : "false");
}
JsonObject& JsonObject::add(const std::string& key, const std::string& value) {
  return add_raw(key, quote(value));
}
JsonObject& JsonObject::add(const std::string& key, const std::vector<std::int64_t>& values) {
  return add_raw(key, fmt::format("[{}]", fmt::join(values, ", ")));
}
JsonObject& JsonObject::add(const std::string& key, const std::vector<std::string>& values) {
  std::string list;
  for (const auto& v : values)
    list += (list.empty() ? "" : ", ") + quote(v);
  return add_raw(key, "[" + list + "]");
}
JsonObject& JsonObject::add(const std::string& key, const std::optional<double>& value) {
  return add_raw(key, value ? number(*value) : "null");
}
JsonObject& JsonObject::add(const std::string& key, const JsonObject& object) {
  return add_raw(key, object.str());
}
JsonObject& JsonObject::add_null(const std::string& key) {
  return add_raw(key, "null");
}
JsonObject& JsonObject::add_raw(const std::string& key, const std::string& json) {
  members_.emplace_back(key, json);
  return *this;
}

std::string JsonObject::str() const {
  std::string out = "{";
  for (std::size_t i = 0; i < members_.size(); ++i)
    out += (i ? ", " : "") + quote(members_[i].first) + ": " + members_[i].second;
  return out + "}";
}

}  // namespace dtensor::conv_cli
