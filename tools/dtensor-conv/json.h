// A tiny JSON object writer for --json and meta.json: flat or nested objects of
// numbers, strings, booleans, nulls and number lists. Non-finite numbers
// become null (JSON has no NaN), so the line always parses.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dtensor::conv_cli {

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
  JsonObject& add_null(const std::string& key);
  /// A value already rendered as JSON (e.g. a list of pairs).
  JsonObject& add_raw(const std::string& key, const std::string& json);

  /// One line, no trailing newline.
  std::string str() const;

  static std::string quote(const std::string& s);
  static std::string number(double v);

 private:
  std::vector<std::pair<std::string, std::string>> members_;
};

}  // namespace dtensor::conv_cli
