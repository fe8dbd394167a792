// A strict little JSON reader for the tests: checks that dtensor-conv's --json
// line is valid JSON (RFC 8259 grammar, no extensions) and gives access to its
// fields. Independent of the CLI's writer, so that a writer bug cannot hide.
#pragma once

#include <cctype>
#include <cstdlib>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace dtensor::testing::json {

struct Value {
  enum class Kind { Null, Bool, Number, String, Array, Object } kind = Kind::Null;
  bool boolean = false;
  double number = 0;
  std::string string;
  std::vector<Value> array;
  std::map<std::string, Value> object;

  bool has(const std::string& key) const { return object.count(key) > 0; }
  const Value& at(const std::string& key) const {
    auto it = object.find(key);
    if (it == object.end()) throw std::runtime_error("json: no key '" + key + "'");
    return it->second;
  }
  bool is_null() const { return kind == Kind::Null; }
  bool is_number() const { return kind == Kind::Number; }
};

class Parser {
 public:
  explicit Parser(const std::string& text) : s_(text) {}

  Value parse() {
    Value v = value();
    ws();
    if (i_ != s_.size()) fail("trailing characters");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    throw std::runtime_error("json: " + why + " at offset " + std::to_string(i_));
  }
  void ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r'))
      ++i_;
  }
  bool eat(const std::string& lit) {
    if (s_.compare(i_, lit.size(), lit) != 0) return false;
    i_ += lit.size();
    return true;
  }
  Value value() {
    ws();
    if (i_ >= s_.size()) fail("unexpected end");
    Value v;
    const char c = s_[i_];
    if (c == '{') {
      v.kind = Value::Kind::Object;
      ++i_;
      ws();
      if (eat("}")) return v;
      do {
        ws();
        if (i_ >= s_.size() || s_[i_] != '"') fail("expected a key");
        const std::string key = str();
        ws();
        if (!eat(":")) fail("expected ':'");
        if (!v.object.emplace(key, value()).second) fail("duplicate key '" + key + "'");
        ws();
      } while (eat(","));
      if (!eat("}")) fail("expected '}'");
    } else if (c == '[') {
      v.kind = Value::Kind::Array;
      ++i_;
      ws();
      if (eat("]")) return v;
      do {
        v.array.push_back(value());
        ws();
      } while (eat(","));
      if (!eat("]")) fail("expected ']'");
    } else if (c == '"') {
      v.kind = Value::Kind::String;
      v.string = str();
    } else if (eat("true")) {
      v.kind = Value::Kind::Bool;
      v.boolean = true;
    } else if (eat("false")) {
      v.kind = Value::Kind::Bool;
    } else if (eat("null")) {
    } else {
      v.kind = Value::Kind::Number;
      v.number = num();
    }
    return v;
  }
  std::string str() {
    ++i_;  // opening quote
    std::string out;
    while (i_ < s_.size() && s_[i_] != '"') {
      if (static_cast<unsigned char>(s_[i_]) < 0x20) fail("control character in a string");
      if (s_[i_] == '\\') {
        ++i_;
        if (i_ >= s_.size()) fail("bad escape");
        const char e = s_[i_];
        if (e == 'u') {
          if (i_ + 4 >= s_.size()) fail("bad \\u escape");
          out += static_cast<char>(std::strtol(s_.substr(i_ + 1, 4).c_str(), nullptr, 16));
          i_ += 4;
        } else if (std::string("\"\\/bfnrt").find(e) != std::string::npos) {
          out += e == 'n' ? '\n' : e == 't' ? '\t' : e;
        } else {
          fail("bad escape");
        }
        ++i_;
      } else {
        out += s_[i_++];
      }
    }
    if (!eat("\"")) fail("unterminated string");
    return out;
  }
  double num() {
    // -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
    const std::size_t start = i_;
    auto digits = [&] {
      const std::size_t d = i_;
      while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_])))
        ++i_;
      return i_ - d;
    };
    eat("-");
    if (eat("0")) {
    } else if (digits() == 0) {
      fail("bad number");
    }
    if (eat(".") && digits() == 0) fail("bad fraction");
    if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
      ++i_;
      if (!eat("+")) eat("-");
      if (digits() == 0) fail("bad exponent");
    }
    return std::strtod(s_.substr(start, i_ - start).c_str(), nullptr);
  }

  const std::string& s_;
  std::size_t i_ = 0;
};

inline Value parse(const std::string& text) {
  return Parser(text).parse();
}

}  // namespace dtensor::testing::json
