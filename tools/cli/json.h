// JSON for --json and meta.json: nlohmann::ordered_json (members in insertion
// order, one line, non-finite numbers written as null, a double in a form that
// reads back to the same double, a whole one below 1e16 without ".0").
// JsonObject is a small chaining front end over it for flat or nested objects
// of numbers, strings, booleans, nulls and lists; JsonValue is the nlohmann
// type itself, for anything else.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace dtensor::cli {

using JsonValue = nlohmann::ordered_json;

class JsonObject {
 public:
  JsonObject& add(const std::string& key, double value);
  JsonObject& add(const std::string& key, std::int64_t value);
  JsonObject& add(const std::string& key, std::uint64_t value);
  JsonObject& add(const std::string& key, int value) {
    return add(key, static_cast<std::int64_t>(value));
  }
  JsonObject& add(const std::string& key, bool value);
  JsonObject& add(const std::string& key, const std::string& value);
  JsonObject& add(const std::string& key, const char* value) {
    return add(key, std::string(value));
  }
  JsonObject& add(const std::string& key, const std::vector<std::int64_t>& values);
  JsonObject& add(const std::string& key, const std::vector<std::string>& values);
  /// A number or null.
  JsonObject& add(const std::string& key, const std::optional<double>& value);
  JsonObject& add(const std::string& key, const JsonObject& object);
  /// Any other JSON value (e.g. a list of pairs).
  JsonObject& add(const std::string& key, const JsonValue& value);
  JsonObject& add_null(const std::string& key);
  /// A value already rendered as JSON (e.g. a list of pairs); it must parse.
  JsonObject& add_raw(const std::string& key, const std::string& json);

  /// One line, no trailing newline; bytes that are not UTF-8 become U+FFFD.
  std::string str() const;
  /// The object itself.
  const JsonValue& value() const { return value_; }

  /// `s` as a JSON string literal.
  static std::string quote(const std::string& s);
  /// `v` as a JSON number, or null when it is not finite.
  static std::string number(double v);

 private:
  JsonValue value_ = JsonValue::object();
};

}  // namespace dtensor::cli
