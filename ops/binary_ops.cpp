// Definitions, sharding strategies and gradients of the broadcasting binary
// operators (add, sub, mul, div, maximum, minimum) and of sum_to_size, the
// reduction that brings a gradient back to a broadcast operand's shape.
// Their CPU kernels live in backends/cpu/broadcast_kernels.cpp.
//
// Strategies, per mesh dim: the output sharded on dim d with each operand
// sharded on its own dim aligned with d, or replicated where it is broadcast
// along d (size 1 or missing: every rank needs all of it); everything
// replicated; and the Partial(sum) signatures where the maths is linear:
// add/sub(P, P), mul(P, R), mul(R, P), div(P, R).
#include <algorithm>
#include <string_view>

#include "dtensor/core/errors.h"
#include "dtensor/ops/dispatch.h"
#include "dtensor/ops/pointwise.h"
#include "dtensor/ops/unary.h"
#include "ops/autograd/backward_helpers.h"

namespace dtensor {
namespace {

using Int = std::int64_t;

// The dim of an operand of rank `nd` aligned with output dim d of an
// `out_nd`-d output; negative where the operand has none.
Int aligned_dim(Int d, Int out_nd, Int nd) {
  return d - (out_nd - nd);
}

// Sharding output dim d (of size out_size) shards an operand along its
// aligned dim when it has the full extent there, and replicates it where it
// is broadcast.
Placement operand_placement(const Shape& shape, Int d, Int out_nd, Int out_size) {
  const Int k = aligned_dim(d, out_nd, static_cast<Int>(shape.size()));
  if (k >= 0 && shape[static_cast<std::size_t>(k)] == out_size) return Shard(k);
  return Replicate();
}

// NumPy's broadcast shape of a and b; InvalidArgument "<what>: shapes ... do
// not broadcast" naming the first dim (from the left of the result) that clashes.
Shape broadcast_or_throw(std::string_view what, const Shape& a, const Shape& b) {
  const std::size_t nd = std::max(a.size(), b.size());
  Shape out(nd);
  for (std::size_t k = 0; k < nd; ++k) {
    const Int x = k + a.size() >= nd ? a[k + a.size() - nd] : 1;
    const Int y = k + b.size() >= nd ? b[k + b.size() - nd] : 1;
    DTENSOR_CHECK_ARG(x == y || x == 1 || y == 1, "ops",
                      "{}: shapes {} and {} do not broadcast (dim {}: {} vs {})", what,
                      shape_str(a), shape_str(b), k, x, y);
    out[k] = x == 1 ? y : x;
  }
  return out;
}

void check_binary(const OpSchema& s) {
  DTENSOR_CHECK_ARG(s.size() == 2, "ops", "{}: {} arguments given, 2 expected", s.op(), s.size());
  const DTensor& a = s.dtensor(0);
  const DTensor& b = s.dtensor(1);
  DTENSOR_CHECK_ARG(a.dtype() == b.dtype(), "ops", "{}: dtypes {} and {} differ", s.op(),
                    dtype_name(a.dtype()), dtype_name(b.dtype()));
  broadcast_or_throw(s.op(), a.shape(), b.shape());
}

std::vector<TensorMeta> broadcast_meta(const OpSchema& s) {
  return {{broadcast_or_throw(s.op(), s.dtensor(0).shape(), s.dtensor(1).shape()),
           s.dtensor(0).dtype()}};
}

std::function<std::vector<ShardingSignature>(const OpSchema&)> binary_signatures(
    std::vector<ShardingSignature> partial_sigs) {
  return [partial_sigs](const OpSchema& s) {
    const Shape& a = s.dtensor(0).shape();
    const Shape& b = s.dtensor(1).shape();
    const Shape out = broadcast_shapes(a, b);
    const Int nd = static_cast<Int>(out.size());
    std::vector<ShardingSignature> sigs;
    for (Int d = 0; d < nd; ++d) {
      const Int n = out[static_cast<std::size_t>(d)];
      sigs.push_back(
          {{operand_placement(a, d, nd, n), operand_placement(b, d, nd, n)}, {Shard(d)}});
    }
    sigs.push_back({{Replicate(), Replicate()}, {Replicate()}});
    sigs.insert(sigs.end(), partial_sigs.begin(), partial_sigs.end());
    return sigs;
  };
}

// ---- sum_to_size: (a, shape) ----
const IntList& target_shape(const OpSchema& s) {
  return s.int_list(1);
}

void check_sum_to_size(const OpSchema& s) {
  DTENSOR_CHECK_ARG(s.size() == 2, s.op(), "{} arguments given, 2 expected", s.size());
  const Shape& a = s.dtensor(0).shape();
  const Shape& t = target_shape(s);
  bool ok = t.size() <= a.size();
  for (std::size_t k = 0; ok && k < t.size(); ++k) {
    const Int n = t[k];
    ok = n == 1 || n == a[a.size() - t.size() + k];
  }
  DTENSOR_CHECK_ARG(ok, s.op(), "shape {} does not broadcast to the input's {}", shape_str(t),
                    shape_str(a));
}

std::vector<TensorMeta> sum_to_size_meta(const OpSchema& s) {
  return {{target_shape(s), s.dtensor(0).dtype()}};
}

// A dim kept keeps its Shard; a dim summed away leaves each rank a partial sum.
std::vector<ShardingSignature> sum_to_size_signatures(const OpSchema& s) {
  const Shape& a = s.dtensor(0).shape();
  const Shape& t = target_shape(s);
  const Int nd = static_cast<Int>(a.size());
  std::vector<ShardingSignature> sigs;
  for (Int d = 0; d < nd; ++d) {
    const Placement p = operand_placement(t, d, nd, a[static_cast<std::size_t>(d)]);
    sigs.push_back({{Shard(d)}, {p.is_shard() ? p : Placement(Partial())}});
  }
  sigs.push_back({{Replicate()}, {Replicate()}});
  sigs.push_back({{Partial()}, {Partial()}});
  return sigs;
}

// ---- gradients ----
using autograd::detail::grad_of_output;
using Grads = std::vector<std::optional<DTensor>>;

// The gradient of a broadcast operand is the sum over the dims it was repeated along.
DTensor reduce_to(const DTensor& g, const DTensor& operand) {
  return g.shape() == operand.shape() ? g : sum_to_size(g, operand.shape());
}

// 1 where a > b, 1/2 where a == b, 0 elsewhere: a's share of the gradient of
// maximum(a, b) (and b's of minimum(b, a)), as PyTorch splits ties.
DTensor maximum_share(const DTensor& a, const DTensor& b) {
  return dispatch("maximum_share", {a, b}).at(0);
}

Grads binary_backward(const BackwardCall& c) {
  const std::string& op = c.forward.op();
  const DTensor& g = grad_of_output(c);
  const DTensor& a = c.forward.dtensor(0);
  const DTensor& b = c.forward.dtensor(1);
  Grads out(2);
  const auto want = [&](std::size_t i, auto&& grad) {
    if (c.needs_input_grad[i]) out[i] = reduce_to(grad(), i == 0 ? a : b);
  };
  if (op == "add") {
    want(0, [&] { return g; });
    want(1, [&] { return g; });
  } else if (op == "sub") {
    want(0, [&] { return g; });
    want(1, [&] { return neg(g); });
  } else if (op == "mul") {
    want(0, [&] { return mul(g, b); });
    want(1, [&] { return mul(g, a); });
  } else if (op == "div") {
    want(0, [&] { return div(g, b); });
    // d(a / b)/db = -a / b^2, in PyTorch's order: -g * a / (b * b).
    want(1, [&] { return div(mul(neg(g), a), mul(b, b)); });
  } else {
    const bool max = op == "maximum";
    want(0, [&] { return mul(g, max ? maximum_share(a, b) : maximum_share(b, a)); });
    want(1, [&] { return mul(g, max ? maximum_share(b, a) : maximum_share(a, b)); });
  }
  return out;
}

OpDef binary_def(const std::string& name, std::vector<ShardingSignature> partial_sigs) {
  OpDef d;
  d.name = name;
  d.validate = check_binary;
  d.output_meta = broadcast_meta;
  d.signatures = binary_signatures(std::move(partial_sigs));
  d.backward = binary_backward;
  return d;
}

struct Registrar {
  Registrar() {
    const ShardingSignature pp_p{{Partial(), Partial()}, {Partial()}};
    const ShardingSignature pr_p{{Partial(), Replicate()}, {Partial()}};
    const ShardingSignature rp_p{{Replicate(), Partial()}, {Partial()}};
    register_op(binary_def("add", {pp_p}));
    register_op(binary_def("sub", {pp_p}));
    register_op(binary_def("mul", {pr_p, rp_p}));
    register_op(binary_def("div", {pr_p}));
    register_op(binary_def("maximum", {}));
    register_op(binary_def("minimum", {}));
    OpDef share = binary_def("maximum_share", {});
    share.backward = {};
    share.differentiable = false;  // a step function of its inputs
    register_op(share);

    OpDef reduce;
    reduce.name = "sum_to_size";
    reduce.validate = check_sum_to_size;
    reduce.output_meta = sum_to_size_meta;
    reduce.signatures = sum_to_size_signatures;
    register_op(reduce);
  }
};
const Registrar registrar;

DTensor binary(const char* op, const DTensor& a, const DTensor& b) {
  return dispatch(op, {a, b}).at(0);
}

}  // namespace

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  return broadcast_or_throw("broadcast_shapes", a, b);
}

DTensor add(const DTensor& a, const DTensor& b) {
  return binary("add", a, b);
}
DTensor sub(const DTensor& a, const DTensor& b) {
  return binary("sub", a, b);
}
DTensor mul(const DTensor& a, const DTensor& b) {
  return binary("mul", a, b);
}
DTensor div(const DTensor& a, const DTensor& b) {
  return binary("div", a, b);
}
DTensor maximum(const DTensor& a, const DTensor& b) {
  return binary("maximum", a, b);
}
DTensor minimum(const DTensor& a, const DTensor& b) {
  return binary("minimum", a, b);
}
DTensor sum_to_size(const DTensor& a, const Shape& shape) {
  return dispatch("sum_to_size", {a, IntList(shape.begin(), shape.end())}).at(0);
}

DTensor scalar_like(const DTensor& a, double value) {
  const DeviceMesh& mesh = a.mesh();
  const Tensor local = Tensor::full({}, value, a.dtype(), a.to_local().device());
  return DTensor(
      local, DTensorSpec(mesh, Placements(static_cast<std::size_t>(mesh.ndim()), Replicate()), {},
                         a.dtype()));
}

DTensor operator+(const DTensor& a, const DTensor& b) {
  return add(a, b);
}
DTensor operator-(const DTensor& a, const DTensor& b) {
  return sub(a, b);
}
DTensor operator*(const DTensor& a, const DTensor& b) {
  return mul(a, b);
}
DTensor operator/(const DTensor& a, const DTensor& b) {
  return div(a, b);
}
DTensor operator+(const DTensor& a, double s) {
  return add(a, scalar_like(a, s));
}
DTensor operator+(double s, const DTensor& a) {
  return add(scalar_like(a, s), a);
}
DTensor operator-(const DTensor& a, double s) {
  return sub(a, scalar_like(a, s));
}
DTensor operator-(double s, const DTensor& a) {
  return sub(scalar_like(a, s), a);
}
DTensor operator*(const DTensor& a, double s) {
  return scale(a, s);
}
DTensor operator*(double s, const DTensor& a) {
  return scale(a, s);
}
DTensor operator/(const DTensor& a, double s) {
  return div(a, scalar_like(a, s));
}
DTensor operator/(double s, const DTensor& a) {
  return div(scalar_like(a, s), a);
}
DTensor operator-(const DTensor& a) {
  return neg(a);
}

}  // namespace dtensor
