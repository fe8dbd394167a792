// Typed calls: an operator's arguments as one struct whose fields are named
// once. From the field list follow
//   - the encoding: the OpArg list dispatch() takes (its key, so the cache
//     key, follows from it: equal calls encode equally);
//   - the decoding, where every error names the field and the operator;
//   - decode once: decoded<Call>(schema) decodes a call's schema the first
//     time a stage asks and hands every later stage (validate, output_meta,
//     strategies, the handler, autograd) the same struct, cached on the
//     schema.
//
//   struct ScaleCall {
//     const DTensor& input;
//     double factor;
//     using Fields = CallFields<const DTensor&, double>;
//     static constexpr Fields::Names names{"input", "factor"};
//   };
//   dispatch("scale", ScaleCall::Fields::encode(x, 2.0));
//   ... const ScaleCall& c = decoded<ScaleCall>(schema);  // in any stage
//
// A field type travels as ArgCodec<T> says: DTensor (const DTensor&), an
// optional DTensor (const DTensor*: None when null), IntList, std::int64_t,
// double, bool, std::string are built in, and ArgTail<T> (every remaining
// argument as a T: the last field only); specialise ArgCodec for a type of
// your own: a parameter struct as its members (MembersCodec), an enum by
// name (EnumByNameCodec).
#pragma once

#include <array>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <typeinfo>
#include <utility>
#include <vector>

#include "dtensor/core/errors.h"
#include "dtensor/ops/op_schema.h"

namespace dtensor {

namespace detail {
/// Argument `at` of `s` as a T; InvalidArgument naming the operator and the
/// field (`what`: "a DTensor", "an int list", ...) otherwise.
template <class T>
const T& call_arg(const OpSchema& s, std::size_t at, std::string_view field, const char* what) {
  DTENSOR_CHECK_ARG(at < s.size(), "dispatch", "{}: {} (argument {}) is missing", s.op(), field,
                    at);
  const T* v = std::get_if<T>(&s.args()[at]);
  DTENSOR_CHECK_ARG(v != nullptr, "dispatch", "{}: {} (argument {}) must be {}", s.op(), field, at,
                    what);
  return *v;
}
}  // namespace detail

/// How a field of type T travels: `width` arguments, written by encode()
/// and read back by decode() from position `at` (messages name `field`).
template <class T>
struct ArgCodec;

template <>
struct ArgCodec<const DTensor&> {
  using Arg = const DTensor&;
  static constexpr std::size_t width = 1;
  static void encode(std::vector<OpArg>& out, const DTensor& v) { out.emplace_back(v); }
  static const DTensor& decode(const OpSchema& s, std::size_t at, std::string_view field) {
    return detail::call_arg<DTensor>(s, at, field, "a DTensor");
  }
};

/// An optional DTensor (a bias): None when absent.
template <>
struct ArgCodec<const DTensor*> {
  using Arg = const DTensor*;
  static constexpr std::size_t width = 1;
  static void encode(std::vector<OpArg>& out, const DTensor* v) {
    out.push_back(v ? OpArg(*v) : OpArg(None{}));
  }
  static const DTensor* decode(const OpSchema& s, std::size_t at, std::string_view field) {
    if (at < s.size() && std::holds_alternative<None>(s.args()[at])) return nullptr;
    return &detail::call_arg<DTensor>(s, at, field, "a DTensor or None");
  }
};

/// The plain values: one argument each.
template <class T, const char* What>
struct PlainArgCodec {
  using Arg = const T&;
  static constexpr std::size_t width = 1;
  static void encode(std::vector<OpArg>& out, const T& v) { out.emplace_back(v); }
  static T decode(const OpSchema& s, std::size_t at, std::string_view field) {
    return detail::call_arg<T>(s, at, field, What);
  }
};
inline constexpr char kIntListWhat[] = "an int list";
inline constexpr char kIntWhat[] = "an int";
inline constexpr char kDoubleWhat[] = "a double";
inline constexpr char kBoolWhat[] = "a bool";
inline constexpr char kStringWhat[] = "a string";
template <>
struct ArgCodec<IntList> : PlainArgCodec<IntList, kIntListWhat> {};
template <>
struct ArgCodec<std::int64_t> : PlainArgCodec<std::int64_t, kIntWhat> {};
template <>
struct ArgCodec<double> : PlainArgCodec<double, kDoubleWhat> {};
template <>
struct ArgCodec<bool> : PlainArgCodec<bool, kBoolWhat> {};
template <>
struct ArgCodec<std::string> : PlainArgCodec<std::string, kStringWhat> {};

/// Per-dim (left, right) pairs (a padding) as one int list l0,r0,l1,r1,...
template <>
struct ArgCodec<std::vector<std::pair<std::int64_t, std::int64_t>>> {
  using Pairs = std::vector<std::pair<std::int64_t, std::int64_t>>;
  using Arg = const Pairs&;
  static constexpr std::size_t width = 1;
  static void encode(std::vector<OpArg>& out, const Pairs& pairs) {
    IntList flat;
    for (const auto& [l, r] : pairs) {
      flat.push_back(l);
      flat.push_back(r);
    }
    out.emplace_back(std::move(flat));
  }
  static Pairs decode(const OpSchema& s, std::size_t at, std::string_view field) {
    const IntList& flat = detail::call_arg<IntList>(s, at, field, "an int list");
    DTENSOR_CHECK_ARG(flat.size() % 2 == 0, "dispatch", "{}: {} must hold (left, right) pairs",
                      s.op(), field);
    Pairs out;
    for (std::size_t i = 0; i < flat.size(); i += 2)
      out.emplace_back(flat[i], flat[i + 1]);
    return out;
  }
};

/// An enum travelling by name: `Name` spells each of `Values`. Specialise
/// ArgCodec<E> as a struct deriving from it.
template <class E, std::string_view (*Name)(E), E... Values>
struct EnumByNameCodec {
  using Arg = E;
  static constexpr std::size_t width = 1;
  static void encode(std::vector<OpArg>& out, E v) { out.emplace_back(std::string(Name(v))); }
  static E decode(const OpSchema& s, std::size_t at, std::string_view field) {
    const std::string& text = detail::call_arg<std::string>(s, at, field, "a string");
    for (E v : {Values...})
      if (Name(v) == text) return v;
    throw InvalidArgument("dispatch",
                          fmt::format("{}: {}: unknown value '{}'", s.op(), field, text));
  }
};

/// An optional int: None when absent (PyTorch's `divisor_override=None`).
template <>
struct ArgCodec<std::optional<std::int64_t>> {
  using Arg = const std::optional<std::int64_t>&;
  static constexpr std::size_t width = 1;
  static void encode(std::vector<OpArg>& out, const std::optional<std::int64_t>& v) {
    out.push_back(v ? OpArg(*v) : OpArg(None{}));
  }
  static std::optional<std::int64_t> decode(const OpSchema& s, std::size_t at,
                                            std::string_view field) {
    if (at < s.size() && std::holds_alternative<None>(s.args()[at])) return std::nullopt;
    return detail::call_arg<std::int64_t>(s, at, field, "an int or None");
  }
};

/// A member's name as a template argument: Member<&ConvParams::stride, "stride">.
template <std::size_t N>
struct MemberName {
  char text[N];
  // NOLINTNEXTLINE(google-explicit-constructor): built from a string literal.
  constexpr MemberName(const char (&s)[N]) {
    for (std::size_t i = 0; i < N; ++i)
      text[i] = s[i];
  }
  constexpr std::string_view view() const { return {text, N - 1}; }
};

/// One member of a parameter struct: it travels by its own type's ArgCodec,
/// and decoding errors name it `Name`.
template <auto Pointer, MemberName Name>
struct Member {
  template <class S, class T>
  static T type_of(T S::*);
  using Type = decltype(type_of(Pointer));
  static constexpr auto pointer = Pointer;
  static constexpr std::string_view name = Name.view();
};

/// A parameter struct as its members' arguments, in order (the struct's
/// fields named once, as a call's are): specialise ArgCodec<S> as a struct
/// deriving from MembersCodec<S, Member<&S::a, "a">, Member<&S::b, "b">>.
template <class S, class... Members>
struct MembersCodec {
  using Arg = const S&;
  static constexpr std::size_t width =
      (std::size_t{0} + ... + ArgCodec<typename Members::Type>::width);
  static void encode(std::vector<OpArg>& out, const S& v) {
    (ArgCodec<typename Members::Type>::encode(out, v.*Members::pointer), ...);
  }
  static S decode(const OpSchema& s, std::size_t at, std::string_view /*field*/) {
    S v;
    ((v.*Members::pointer = ArgCodec<typename Members::Type>::decode(s, at, Members::name),
      at += ArgCodec<typename Members::Type>::width),
     ...);
    return v;
  }
};

/// The call's remaining arguments, one T each: a tail of any length (the
/// last field only; e.g. a scale per spatial dim).
template <class T>
struct ArgTail : std::vector<T> {
  using std::vector<T>::vector;
};

template <class T>
struct ArgCodec<ArgTail<T>> {
  using Arg = const std::vector<T>&;
  static constexpr std::size_t width = 0;  // at least
  static constexpr bool variable = true;
  static void encode(std::vector<OpArg>& out, const std::vector<T>& values) {
    for (const T& v : values)
      ArgCodec<T>::encode(out, v);
  }
  static ArgTail<T> decode(const OpSchema& s, std::size_t at, std::string_view field) {
    ArgTail<T> out;
    for (std::size_t i = at; i < s.size(); i += ArgCodec<T>::width)
      out.push_back(ArgCodec<T>::decode(s, i, field));
    return out;
  }
};

namespace detail {
template <class Codec>
concept VariableWidth = Codec::variable;
}  // namespace detail

/// A call's fields, in the order of the call struct's members.
template <class... Ts>
struct CallFields {
  using Names = std::array<std::string_view, sizeof...(Ts)>;
  /// How many OpArgs the call takes.
  static constexpr std::size_t width = (std::size_t{0} + ... + ArgCodec<Ts>::width);

  /// The OpArg list of a call with these field values.
  static std::vector<OpArg> encode(typename ArgCodec<Ts>::Arg... values) {
    std::vector<OpArg> out;
    out.reserve(width);
    (ArgCodec<Ts>::encode(out, values), ...);
    return out;
  }

  /// Whether the last field is a tail of any length (ArgTail).
  static constexpr bool variable = (false || ... || detail::VariableWidth<ArgCodec<Ts>>);

  /// The call struct read back from `s` (which must hold exactly `width`
  /// arguments, at least `width` with a tail); InvalidArgument naming the
  /// field otherwise.
  template <class Call>
  static Call decode(const OpSchema& s, const Names& names) {
    if constexpr (variable)
      DTENSOR_CHECK_ARG(s.size() >= width, "dispatch",
                        "{}: {} arguments given, {} or more expected", s.op(), s.size(), width);
    else
      DTENSOR_CHECK_ARG(s.size() == width, "dispatch", "{}: {} arguments given, {} expected",
                        s.op(), s.size(), width);
    return decode_fields<Call>(s, names, std::index_sequence_for<Ts...>{});
  }

 private:
  static constexpr std::size_t offset(std::size_t field) {
    constexpr std::array<std::size_t, sizeof...(Ts)> widths{ArgCodec<Ts>::width...};
    std::size_t at = 0;
    for (std::size_t k = 0; k < field; ++k)
      at += widths[k];
    return at;
  }
  template <class Call, std::size_t... I>
  static Call decode_fields(const OpSchema& s, const Names& names, std::index_sequence<I...>) {
    // Braced initialisation reads the fields in order.
    return Call{ArgCodec<Ts>::decode(s, offset(I), names[I])...};
  }
};

/// The call `s` holds as a `Call`, made by `decode()` the first time any
/// stage asks and shared by every later one (a struct that refers to the
/// schema's own arguments lives as long as the schema). For a call spelled
/// by a decoder of its own rather than CallFields.
template <class Call, class Decode>
const Call& decoded(const OpSchema& s, Decode&& decode) {
  if (const void* hit = s.cached_call(typeid(Call))) return *static_cast<const Call*>(hit);
  auto call = std::make_shared<const Call>(decode());
  const Call& out = *call;
  s.cache_call(typeid(Call), std::move(call));
  return out;
}

/// The typed call `s` holds, decoded from its field list the first time any
/// stage asks and shared by every later one.
template <class Call>
const Call& decoded(const OpSchema& s) {
  return decoded<Call>(s, [&] { return Call::Fields::template decode<Call>(s, Call::names); });
}

}  // namespace dtensor
