// How a tensor lives on one mesh dimension: Shard(d), Replicate or Partial(op).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "dtensor/core/process_group.h"

namespace dtensor {

class Placement {
 public:
  enum class Kind : std::uint8_t { Shard, Replicate, Partial };

  static Placement shard(std::int64_t dim) { return Placement(Kind::Shard, dim, ReduceOp::Sum); }
  static Placement replicate() { return Placement(Kind::Replicate, 0, ReduceOp::Sum); }
  static Placement partial(ReduceOp op = ReduceOp::Sum) { return Placement(Kind::Partial, 0, op); }

  Kind kind() const { return kind_; }
  bool is_shard() const { return kind_ == Kind::Shard; }
  bool is_shard(std::int64_t d) const { return is_shard() && dim_ == d; }
  bool is_replicate() const { return kind_ == Kind::Replicate; }
  bool is_partial() const { return kind_ == Kind::Partial; }
  /// The sharded tensor dim (Shard only).
  std::int64_t dim() const { return dim_; }
  /// The pending reduction (Partial only).
  ReduceOp reduce_op() const { return op_; }

  /// Shard(d) with a negative d resolved against a tensor of rank `ndim`.
  Placement normalized(std::int64_t ndim) const;

  bool operator==(const Placement& o) const {
    return kind_ == o.kind_ && (kind_ != Kind::Shard || dim_ == o.dim_) &&
           (kind_ != Kind::Partial || op_ == o.op_);
  }
  std::size_t hash() const;
  /// "S(3)", "R", "P(sum)".
  std::string str() const;

 private:
  Placement(Kind k, std::int64_t d, ReduceOp op) : kind_(k), dim_(d), op_(op) {}
  Kind kind_;
  std::int64_t dim_;
  ReduceOp op_;
};

using Placements = std::vector<Placement>;

/// PyTorch-style spellings.
inline Placement Shard(std::int64_t dim) {
  return Placement::shard(dim);
}
inline Placement Replicate() {
  return Placement::replicate();
}
inline Placement Partial(ReduceOp op = ReduceOp::Sum) {
  return Placement::partial(op);
}

/// "S(3),R,P(sum)".
std::string placements_str(const Placements& p);
/// Parses "S3", "S(3)", "S-1", "R", "P", "P(sum)", "P(avg)", ... separated by commas.
/// Throws InvalidArgument naming `what` (e.g. "--placements").
Placements parse_placements(const std::string& text, const char* what = "placements");

}  // namespace dtensor
