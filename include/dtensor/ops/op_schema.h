// OpSchema: one call of an operator, as the dispatcher sees it: the name and
// the arguments (DTensors, plain Tensors, int lists, scalars, flags, nones),
// plus a key made of the input specs and the non-tensor arguments that
// decides the sharding (and so keys the propagation cache).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <typeinfo>
#include <utility>
#include <variant>
#include <vector>

#include "dtensor/placement/dtensor.h"

namespace dtensor {

using IntList = std::vector<std::int64_t>;
/// An absent optional argument (e.g. no bias).
struct None {
  bool operator==(const None&) const = default;
};
using OpArg = std::variant<None, DTensor, Tensor, IntList, std::int64_t, double, bool, std::string>;

/// What decides the sharding of a call: the op, every DTensor argument's spec
/// and every other argument's value (tensors only by dtype and shape).
struct OpSchemaKey {
  std::string op{};
  std::vector<DTensorSpec> specs{};
  // The non-DTensor arguments, encoded exactly as words (a kind tag, then the
  // value: an int, a double's bits, a list's or string's length and
  // contents, a tensor's dtype, device and shape). Built on every dispatch,
  // so no text: the key of a cached call costs no formatting.
  std::vector<std::uint64_t> rest{};
  bool operator==(const OpSchemaKey& o) const {
    return op == o.op && rest == o.rest && specs == o.specs;
  }
};
struct OpSchemaKeyHash {
  std::size_t operator()(const OpSchemaKey& k) const;
};

class OpSchema {
 public:
  OpSchema(std::string op, std::vector<OpArg> args);

  const std::string& op() const { return op_; }
  const std::vector<OpArg>& args() const { return args_; }
  std::size_t size() const { return args_.size(); }

  /// Typed access; InvalidArgument naming the op and position on a type mismatch.
  const DTensor& dtensor(std::size_t i) const;
  const Tensor& tensor(std::size_t i) const;
  const IntList& int_list(std::size_t i) const;
  std::int64_t int_value(std::size_t i) const;
  double scalar(std::size_t i) const;  // double or int
  bool flag(std::size_t i) const;
  const std::string& text(std::size_t i) const;
  bool is_none(std::size_t i) const;
  bool is_dtensor(std::size_t i) const;

  /// Positions of the DTensor arguments, in order.
  const std::vector<std::size_t>& dtensor_positions() const { return dtensor_pos_; }
  /// Their specs, in the same order.
  std::vector<DTensorSpec> input_specs() const;
  /// The mesh all DTensor arguments share (InvalidArgument if they differ or there are none).
  const DeviceMesh& mesh() const;

  const OpSchemaKey& key() const { return key_; }
  std::string str() const;

  /// The call decoded as `type` (typed_call.h's decoded<Call>()), or null
  /// when no stage has decoded it yet. A copy of the schema starts without:
  /// a decoded call refers to its own schema's arguments.
  const void* cached_call(const std::type_info& type) const;
  void cache_call(const std::type_info& type, std::shared_ptr<const void> call) const;

 private:
  // Moves keep the decoded calls (the arguments' storage moves with them);
  // copies start empty.
  struct DecodedCalls {
    DecodedCalls() = default;
    DecodedCalls(const DecodedCalls&) {}
    DecodedCalls(DecodedCalls&&) noexcept = default;
    DecodedCalls& operator=(const DecodedCalls&) {
      entries.clear();
      return *this;
    }
    DecodedCalls& operator=(DecodedCalls&&) noexcept = default;
    std::vector<std::pair<const std::type_info*, std::shared_ptr<const void>>> entries;
  };

  std::string op_;
  std::vector<OpArg> args_;
  std::vector<std::size_t> dtensor_pos_;
  OpSchemaKey key_;
  mutable DecodedCalls decoded_;
};

}  // namespace dtensor
