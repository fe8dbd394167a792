#include "tools/cli/value_reader.h"

#include <charconv>
#include <cmath>
#include <exception>
#include <string>

#include <fmt/format.h>

namespace dtensor::cli {

void fail(std::string_view option, const std::string& message) {
  throw UsageError(fmt::format("{}: {}", option, message));
}

std::string without_component(const std::string& what) {
  if (what.rfind("[dtensor.", 0) == 0) {
    const auto end = what.find("] ");
    if (end != std::string::npos) return what.substr(end + 2);
  }
  return what;
}

bool asks_for_help(const std::vector<std::string>& args) {
  for (const auto& a : args)
    if (a == "--help" || a == "-h") return true;
  return false;
}

std::vector<std::string_view> split(std::string_view text, char sep) {
  std::vector<std::string_view> parts;
  std::size_t start = 0;
  while (true) {
    const std::size_t at = text.find(sep, start);
    parts.push_back(text.substr(start, at == std::string_view::npos ? at : at - start));
    if (at == std::string_view::npos) return parts;
    start = at + 1;
  }
}

std::int64_t ValueReader::integer(std::string_view option, std::string_view text) const {
  std::int64_t v = 0;
  const char* first = text.data();
  const char* last = text.data() + text.size();
  if (accept_plus_ && !text.empty() && text[0] == '+') ++first;  // from_chars rejects '+'
  const auto [end, ec] = std::from_chars(first, last, v);
  if (text.empty() || first == last || ec != std::errc() || end != last)
    fail(option, fmt::format("'{}' is not an integer", text));
  return v;
}

std::int64_t ValueReader::integer_at_least(std::string_view option, std::string_view text,
                                           std::int64_t min) const {
  const std::int64_t v = integer(option, text);
  if (v < min) fail(option, fmt::format("{} must be >= {}", v, min));
  return v;
}

double ValueReader::number(std::string_view option, std::string_view text) const {
  const std::string s(text);
  std::size_t used = 0;
  double v = 0;
  try {
    v = std::stod(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (s.empty() || used != s.size() || !std::isfinite(v))
    fail(option, fmt::format("'{}' is not a finite number", text));
  return v;
}

std::vector<std::int64_t> ValueReader::list(std::string_view option, std::string_view text,
                                            std::int64_t min, char sep) const {
  if (text.empty()) fail(option, "empty list");
  std::vector<std::int64_t> out;
  for (auto part : split(text, sep))
    out.push_back(integer_at_least(option, part, min));
  return out;
}

ConvParams::Padding ValueReader::padding_lr(std::string_view option, std::string_view text,
                                            std::int64_t min) const {
  if (text.empty()) fail(option, "empty list");
  ConvParams::Padding out;
  for (auto part : split(text, ',')) {
    const auto halves = split(part, ':');
    if (halves.size() != 2)
      fail(option, fmt::format("'{}' is not a LEFT:RIGHT pair (e.g. 1:2)", part));
    out.emplace_back(integer_at_least(option, halves[0], min),
                     integer_at_least(option, halves[1], min));
  }
  return out;
}

}  // namespace dtensor::cli
