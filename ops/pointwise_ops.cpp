// Definitions and sharding strategies of scale, relu and the reductions to a
// scalar. Their CPU kernels live in backends/cpu/elementwise_kernels.cpp (sum
// and mean in backends/eigen/); the broadcasting binary operators are in
// binary_ops.cpp.
//
// Partial(sum) is allowed exactly where the maths is linear in that input:
// scale(P), relu_backward(P, R), sum(P); relu is not linear, so a Partial
// input is reduced first.
#include "dtensor/core/errors.h"
#include "dtensor/ops/dispatch.h"
#include "dtensor/ops/pointwise.h"
#include "ops/autograd/backward_helpers.h"

namespace dtensor {
namespace {

void check_same_shape(const OpSchema& s, std::size_t i, std::size_t j) {
  const auto& a = s.dtensor(i);
  const auto& b = s.dtensor(j);
  DTENSOR_CHECK_ARG(a.shape() == b.shape(), "ops", "{}: shapes {} and {} differ", s.op(),
                    shape_str(a.shape()), shape_str(b.shape()));
  DTENSOR_CHECK_ARG(a.dtype() == b.dtype(), "ops", "{}: dtypes {} and {} differ", s.op(),
                    dtype_name(a.dtype()), dtype_name(b.dtype()));
}

std::vector<TensorMeta> same_as_input(const OpSchema& s) {
  return {{s.dtensor(0).shape(), s.dtensor(0).dtype()}};
}
std::vector<TensorMeta> scalar_output(const OpSchema& s) {
  return {{{}, s.dtensor(0).dtype()}};
}

// Shard(d) on every input and the output, for every tensor dim, then Replicate;
// plus the op's own Partial signatures.
std::function<std::vector<ShardingSignature>(const OpSchema&)> shard_or_replicate(
    std::size_t n_in, std::vector<ShardingSignature> partial_sigs) {
  return [n_in, partial_sigs](const OpSchema& s) {
    std::vector<ShardingSignature> sigs;
    for (std::int64_t d = 0; d < s.dtensor(0).spec().ndim(); ++d)
      sigs.push_back({Placements(n_in, Shard(d)), {Shard(d)}});
    sigs.push_back({Placements(n_in, Replicate()), {Replicate()}});
    sigs.insert(sigs.end(), partial_sigs.begin(), partial_sigs.end());
    return sigs;
  };
}

// A sharded input's local sums are partial sums of the whole.
std::vector<ShardingSignature> reduction_signatures(const OpSchema& s) {
  std::vector<ShardingSignature> sigs;
  for (std::int64_t d = 0; d < s.dtensor(0).spec().ndim(); ++d)
    sigs.push_back({{Shard(d)}, {Partial()}});
  sigs.push_back({{Replicate()}, {Replicate()}});
  sigs.push_back({{Partial()}, {Partial()}});
  return sigs;
}

OpDef make_def(std::string name, std::function<void(const OpSchema&)> validate,
               std::function<std::vector<TensorMeta>(const OpSchema&)> meta,
               std::function<std::vector<ShardingSignature>(const OpSchema&)> signatures) {
  OpDef d;
  d.name = std::move(name);
  d.validate = std::move(validate);
  d.output_meta = std::move(meta);
  d.signatures = std::move(signatures);
  return d;
}

void same_shapes(const OpSchema& s) {
  check_same_shape(s, 0, 1);
}
void scalar_second(const OpSchema& s) {
  s.scalar(1);
}
void no_checks(const OpSchema&) {}

// ---- gradients ----
using autograd::detail::grad_of_output;
using Grads = std::vector<std::optional<DTensor>>;

Grads scale_backward(const BackwardCall& c) {
  return {scale(grad_of_output(c), c.forward.scalar(1))};
}
Grads sum_backward(const BackwardCall& c) {
  return {autograd::detail::broadcast_scalar_gradient(grad_of_output(c),
                                                      c.forward.dtensor(0).spec(), 1.0)};
}
Grads mean_backward(const BackwardCall& c) {
  const auto n = shape_numel(c.forward.dtensor(0).shape());
  return {autograd::detail::broadcast_scalar_gradient(
      grad_of_output(c), c.forward.dtensor(0).spec(), 1.0 / static_cast<double>(n))};
}

OpDef with_backward(OpDef d, BackwardFunction b) {
  d.backward = std::move(b);
  return d;
}

struct Registrar {
  Registrar() {
    const ShardingSignature pr_p{{Partial(), Replicate()}, {Partial()}};
    const ShardingSignature p_p{{Partial()}, {Partial()}};
    register_op(
        with_backward(make_def("scale", scalar_second, same_as_input, shard_or_replicate(1, {p_p})),
                      scale_backward));
    register_op(with_backward(make_def("relu", no_checks, same_as_input, shard_or_replicate(1, {})),
                              autograd::detail::via_backward_op("relu_backward")));
    register_op(
        make_def("relu_backward", same_shapes, same_as_input, shard_or_replicate(2, {pr_p})));
    register_op(with_backward(make_def("sum", no_checks, scalar_output, reduction_signatures),
                              sum_backward));
    register_op(with_backward(make_def("mean", no_checks, scalar_output, reduction_signatures),
                              mean_backward));
  }
};
const Registrar registrar;

DTensor one(std::vector<DTensor> v) {
  return std::move(v.at(0));
}

}  // namespace

DTensor scale(const DTensor& a, double s) {
  return one(dispatch("scale", {a, s}));
}
DTensor relu(const DTensor& a) {
  return one(dispatch("relu", {a}));
}
DTensor relu_backward(const DTensor& g, const DTensor& x) {
  return one(dispatch("relu_backward", {g, x}));
}
DTensor sum(const DTensor& a) {
  return one(dispatch("sum", {a}));
}
DTensor mean(const DTensor& a) {
  return one(dispatch("mean", {a}));
}

}  // namespace dtensor
