// The dtype conversion "to" (input, dtype name): its definition, placements
// and gradient. The conversion itself is the CPU backend's kernel
// (backends/cpu/cast_kernels.cpp); autocast (ops/autocast.cpp) inserts it in
// front of the operators it runs in another dtype, so that autograd sees the
// casts and every gradient comes back in its parameter's dtype.
#include "dtensor/core/errors.h"
#include "dtensor/ops/dispatch.h"
#include "dtensor/ops/dtype_cast.h"

namespace dtensor {
namespace {

constexpr const char* kOp = "to";

void check(const OpSchema& s) {
  DTENSOR_CHECK_ARG(s.size() == 2, kOp, "{} arguments given, 2 expected (input, dtype)", s.size());
  s.dtensor(0);
  // InvalidArgument naming dtype; the integer dtype is no conversion target
  // (a float has no one integer to become).
  require_floating(parse_dtype(s.text(1)), "to: dtype");
}

std::vector<TensorMeta> converted(const OpSchema& s) {
  return {{s.dtensor(0).shape(), parse_dtype(s.text(1))}};
}

// A conversion is element-wise and commutes with the placement: every Shard,
// Replicate and Partial passes through unchanged.
std::vector<ShardingSignature> passes_through(const OpSchema& s) {
  std::vector<ShardingSignature> sigs;
  for (std::int64_t d = 0; d < s.dtensor(0).spec().ndim(); ++d)
    sigs.push_back({{Shard(d)}, {Shard(d)}});
  sigs.push_back({{Replicate()}, {Replicate()}});
  sigs.push_back({{Partial()}, {Partial()}});
  return sigs;
}

std::vector<std::optional<DTensor>> back_to_input_dtype(const BackwardCall& c) {
  if (!c.grad_outputs.at(0)) return {std::nullopt};
  return {to(*c.grad_outputs[0], c.forward.dtensor(0).dtype())};
}

struct Registrar {
  Registrar() {
    OpDef def;
    def.name = kOp;
    def.validate = check;
    def.output_meta = converted;
    def.signatures = passes_through;
    def.backward = back_to_input_dtype;
    register_op(def);
  }
};
const Registrar registrar;

}  // namespace

DTensor to(const DTensor& input, DType dtype) {
  if (input.dtype() == dtype) return input;
  return dispatch(kOp, {input, std::string(dtype_name(dtype))}).at(0);
}

}  // namespace dtensor
