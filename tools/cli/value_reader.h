// Reading option values as both command lines spell them: integers, lists,
// LEFT:RIGHT pairs; every mistake a UsageError that starts with the option.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "dtensor/ops/conv_params.h"
#include "tools/cli/command_line.h"

namespace dtensor::cli {

/// A UsageError "OPTION: message".
[[noreturn]] void fail(std::string_view option, const std::string& message);

/// Library errors read "[dtensor.ops] padding: ..."; on a command line the
/// component prefix is noise: this is the message without it.
std::string without_component(const std::string& what);

/// --help or -h anywhere on the line, even as another option's value: then
/// nothing else is checked.
bool asks_for_help(const std::vector<std::string>& args);

/// `text` cut at every `sep` (empty parts kept).
std::vector<std::string_view> split(std::string_view text, char sep);

class ValueReader {
 public:
  /// `accept_plus`: "+3" reads as 3 (dtensor-op) or is not an integer
  /// (dtensor-conv, whose rules predate it).
  explicit ValueReader(bool accept_plus) : accept_plus_(accept_plus) {}

  /// A whole-string integer: "3" yes; "3x", "", "0x10" no.
  std::int64_t integer(std::string_view option, std::string_view text) const;
  std::int64_t integer_at_least(std::string_view option, std::string_view text,
                                std::int64_t min) const;
  /// A whole-string finite number ("1e-5", "+2", ".5"; not "nan", "1x").
  double number(std::string_view option, std::string_view text) const;
  /// "a,b,c" (or another separator), each at least `min`; not empty.
  std::vector<std::int64_t> list(std::string_view option, std::string_view text, std::int64_t min,
                                 char sep = ',') const;
  /// "l:r,l:r", each side at least `min`; not empty.
  ConvParams::Padding padding_lr(std::string_view option, std::string_view text,
                                 std::int64_t min) const;

 private:
  bool accept_plus_;
};

}  // namespace dtensor::cli
