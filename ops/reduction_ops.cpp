// Definitions, sharding strategies and gradients of the reductions over dims
// (sum_dims, mean_dims, amax, amin, var), of their backward helpers
// (reduce_expand, reduce_tie_mask), and softmax / log_softmax, which are
// built from them. Kernels: backends/cpu/reduce_kernels.cpp.
//
// Argument layouts (docs/operators.md):
//   sum_dims | mean_dims | amax | amin: input, dims (normalised), keepdim
//   var: input, dims, correction, keepdim
//   reduce_expand: grad (the reduction's shape), input, dims, keepdim, scale
//   reduce_tie_mask: input, result (the reduction's shape), dims, keepdim
//
// Strategies, per mesh dim: a dim that is not reduced keeps its Shard (at
// its place in the result); a reduced dim that is sharded leaves each rank a
// partial result: Partial(sum) for sum and mean (mean's kernel divides by the
// global count, so the partial terms add up to the mean), Partial(max) /
// Partial(min) for amax / amin, and for var a record (count, mean, M2) that
// var's handler merges across ranks with Chan's formula into a replicated
// result. Partial(sum) passes through sum and mean, which are linear.
#include <algorithm>
#include <cmath>
#include <string_view>

#include <fmt/ranges.h>

#include "dtensor/core/errors.h"
#include "dtensor/ops/dispatch.h"
#include "dtensor/ops/kernels/reduce.h"
#include "dtensor/ops/pointwise.h"
#include "dtensor/ops/reductions.h"
#include "dtensor/ops/unary.h"
#include "ops/autograd/backward_helpers.h"
#include "ops/norm/stat_reduction.h"

namespace dtensor {
namespace {

using Int = std::int64_t;

bool contains(const IntList& dims, Int d) {
  return std::binary_search(dims.begin(), dims.end(), d);
}

// Where input dim d lands in the result (d is not reduced).
Int result_dim(const IntList& dims, Int d, bool keepdim) {
  if (keepdim) return d;
  return d - static_cast<Int>(std::lower_bound(dims.begin(), dims.end(), d) - dims.begin());
}

Shape reduced_shape(const Shape& in, const IntList& dims, bool keepdim) {
  Shape out;
  for (Int d = 0; d < static_cast<Int>(in.size()); ++d) {
    if (!contains(dims, d))
      out.push_back(in[static_cast<std::size_t>(d)]);
    else if (keepdim)
      out.push_back(1);
  }
  return out;
}

// The number of input elements reduced into each result.
Int reduced_count(const Shape& in, const IntList& dims) {
  Int n = 1;
  for (Int d : dims)
    n *= in[static_cast<std::size_t>(d)];
  return n;
}

// normalize_reduction_dims, with errors naming `op`.
IntList resolve_dims(std::string_view op, const IntList& dims, Int ndim) {
  IntList out;
  if (dims.empty()) {
    for (Int d = 0; d < ndim; ++d)
      out.push_back(d);
    return out;
  }
  for (Int d : dims) {
    const bool ok = ndim > 0 ? (d >= -ndim && d < ndim) : (d == 0 || d == -1);
    check_arg(ok, op, "dims: {} is out of range for a {}-d input", d, ndim);
    if (ndim > 0) out.push_back(d < 0 ? d + ndim : d);
  }
  std::sort(out.begin(), out.end());
  DTENSOR_CHECK_ARG(std::adjacent_find(out.begin(), out.end()) == out.end(), op,
                    "dims: a dim is given twice in [{}]", fmt::join(dims, ", "));
  return out;
}

// dims must be what normalize_reduction_dims gives: sorted, distinct, in range.
void check_dims(const OpSchema& s, std::size_t at, Int ndim) {
  const IntList& dims = s.int_list(at);
  DTENSOR_CHECK_ARG(resolve_dims(s.op(), dims, ndim) == dims, s.op(),
                    "dims: expected sorted distinct dims in [0, {}), got [{}]", ndim,
                    fmt::join(dims, ", "));
}

// ---- sum_dims, mean_dims, amax, amin, var: (input, dims, [correction,] keepdim) ----
std::size_t keepdim_at(const OpSchema& s) {
  return s.op() == "var" ? 3 : 2;
}

void check_reduction(const OpSchema& s) {
  const std::size_t n = keepdim_at(s) + 1;
  DTENSOR_CHECK_ARG(s.size() == n, s.op(), "{} arguments given, {} expected", s.size(), n);
  check_dims(s, 1, s.dtensor(0).spec().ndim());
  s.flag(keepdim_at(s));
  if (s.op() == "var") {
    const double c = s.scalar(2);
    check_arg(std::isfinite(c) && c >= 0, s.op(), "correction: must be finite and >= 0, got {}", c);
  }
}

std::vector<TensorMeta> reduction_meta(const OpSchema& s) {
  const DTensor& x = s.dtensor(0);
  return {{reduced_shape(x.shape(), s.int_list(1), s.flag(keepdim_at(s))), x.dtype()}};
}

// What a reduced dim that is sharded leaves on its mesh dim.
Placement partial_result(const std::string& op) {
  if (op == "amax") return Partial(ReduceOp::Max);
  if (op == "amin") return Partial(ReduceOp::Min);
  if (op == "var") return Replicate();  // the handler's merge makes it so
  return Partial();
}

std::vector<ShardingSignature> reduction_signatures(const OpSchema& s) {
  const DTensor& x = s.dtensor(0);
  const IntList& dims = s.int_list(1);
  const bool keepdim = s.flag(keepdim_at(s));
  std::vector<ShardingSignature> sigs;
  for (Int d = 0; d < x.spec().ndim(); ++d) {
    if (contains(dims, d))
      sigs.push_back({{Shard(d)}, {partial_result(s.op())}});
    else
      sigs.push_back({{Shard(d)}, {Shard(result_dim(dims, d, keepdim))}});
  }
  sigs.push_back({{Replicate()}, {Replicate()}});
  if (s.op() == "sum_dims" || s.op() == "mean_dims") sigs.push_back({{Partial()}, {Partial()}});
  return sigs;
}

// ---- var's handler: local moments, Chan's merge across ranks, the variance ----
norm::ReductionPlan var_plan(const DeviceMesh& mesh, const Placements& input, const IntList& dims) {
  norm::ReductionPlan plan;
  for (Int m = 0; m < mesh.ndim(); ++m) {
    const Placement& p = input[static_cast<std::size_t>(m)];
    if (mesh.size(m) > 1 && p.is_shard() && contains(dims, p.dim())) plan.mesh_dims.push_back(m);
  }
  return plan;
}

std::vector<DTensor> var_forward(OpCall& call) {
  const OpSchema& s = call.schema();
  const IntList& dims = s.int_list(1);
  const auto inputs = call.redistributed_inputs();
  const DTensor& x = inputs.at(0);
  const DTensorSpec& out_spec = call.sharding().output_specs.at(0);
  const Tensor local = x.to_local().contiguous();
  const DeviceType device = local.device().type;
  const Shape out_local = out_spec.local_shape();
  Tensor moments = Tensor::zeros({shape_numel(out_local), 3}, DType::F64);
  run_kernel(kernels::kReduceMoments, device, local.dtype(),
             {local, kernels::reduced_mask(dims, static_cast<std::size_t>(local.dim())), moments});
  const norm::ReductionPlan plan = var_plan(s.mesh(), x.spec().placements(), dims);
  norm::merge_moments(call, plan, moments);
  Tensor out = Tensor::empty(out_local, local.dtype());
  run_kernel(kernels::kVarFromMoments, DeviceType::CPU, local.dtype(), {moments, s.scalar(2), out});
  if (local.device() != out.device()) out = out.to(local.device());
  return {DTensor(out, out_spec)};
}

// ---- reduce_expand: (grad, input, dims, keepdim, scale) -> input's shape ----
void check_expand(const OpSchema& s) {
  DTENSOR_CHECK_ARG(s.size() == 5, s.op(), "{} arguments given, 5 expected", s.size());
  const DTensor& g = s.dtensor(0);
  const DTensor& x = s.dtensor(1);
  check_dims(s, 2, x.spec().ndim());
  const Shape want = reduced_shape(x.shape(), s.int_list(2), s.flag(3));
  DTENSOR_CHECK_ARG(g.shape() == want, s.op(), "grad: shape {} is not the reduction's {}",
                    shape_str(g.shape()), shape_str(want));
  s.scalar(4);
}

std::vector<TensorMeta> expand_meta(const OpSchema& s) {
  return {{s.dtensor(1).shape(), s.dtensor(0).dtype()}};
}

// The result is placed like the input; the gradient like the reduction's
// result of that input (replicated along a reduced dim). Linear in grad: a
// Partial grad gives a Partial result. The input is read for its shape only,
// so a Partial input need not be reduced.
std::vector<ShardingSignature> expand_signatures(const OpSchema& s) {
  const IntList& dims = s.int_list(2);
  const bool keepdim = s.flag(3);
  std::vector<ShardingSignature> sigs;
  for (Int d = 0; d < s.dtensor(1).spec().ndim(); ++d) {
    const Placement g =
        contains(dims, d) ? Placement(Replicate()) : Placement(Shard(result_dim(dims, d, keepdim)));
    sigs.push_back({{g, Shard(d)}, {Shard(d)}});
  }
  sigs.push_back({{Replicate(), Replicate()}, {Replicate()}});
  sigs.push_back({{Replicate(), Partial()}, {Replicate()}});
  sigs.push_back({{Partial(), Replicate()}, {Partial()}});
  sigs.push_back({{Partial(), Partial()}, {Partial()}});
  return sigs;
}

// ---- reduce_tie_mask: (input, result, dims, keepdim) -> input's shape ----
void check_tie_mask(const OpSchema& s) {
  DTENSOR_CHECK_ARG(s.size() == 4, s.op(), "{} arguments given, 4 expected", s.size());
  const DTensor& x = s.dtensor(0);
  check_dims(s, 2, x.spec().ndim());
  const Shape want = reduced_shape(x.shape(), s.int_list(2), s.flag(3));
  DTENSOR_CHECK_ARG(s.dtensor(1).shape() == want, s.op(),
                    "result: shape {} is not the reduction's {}", shape_str(s.dtensor(1).shape()),
                    shape_str(want));
}

std::vector<TensorMeta> tie_mask_meta(const OpSchema& s) {
  return {{s.dtensor(0).shape(), s.dtensor(0).dtype()}};
}

std::vector<ShardingSignature> tie_mask_signatures(const OpSchema& s) {
  const IntList& dims = s.int_list(2);
  const bool keepdim = s.flag(3);
  std::vector<ShardingSignature> sigs;
  for (Int d = 0; d < s.dtensor(0).spec().ndim(); ++d) {
    const Placement r =
        contains(dims, d) ? Placement(Replicate()) : Placement(Shard(result_dim(dims, d, keepdim)));
    sigs.push_back({{Shard(d), r}, {Shard(d)}});
  }
  sigs.push_back({{Replicate(), Replicate()}, {Replicate()}});
  return sigs;
}

// ---- gradients ----
using autograd::detail::grad_of_output;
using Grads = std::vector<std::optional<DTensor>>;

DTensor expand(const DTensor& g, const DTensor& x, const IntList& dims, bool keepdim,
               double scale) {
  return dispatch("reduce_expand", {g, x, dims, keepdim, scale}).at(0);
}

Grads reduction_backward(const BackwardCall& c) {
  const OpSchema& f = c.forward;
  const std::string& op = f.op();
  const DTensor& x = f.dtensor(0);
  const IntList& dims = f.int_list(1);
  const bool keepdim = f.flag(keepdim_at(f));
  const DTensor& g = grad_of_output(c);
  const auto n = static_cast<double>(reduced_count(x.shape(), dims));
  if (op == "sum_dims") return {expand(g, x, dims, keepdim, 1.0)};
  if (op == "mean_dims") return {expand(g, x, dims, keepdim, 1.0 / n)};
  if (op == "var") {
    // d var / d x = 2 (x - mean) / (N - correction).
    const DTensor centred = sub(x, mean(x, dims, true));
    const double divisor = std::max(0.0, n - f.scalar(2));
    return {mul(expand(g, x, dims, keepdim, 2.0 / divisor), centred)};
  }
  // amax / amin: the gradient shared evenly among the elements equal to the
  // result (torch: grad / count of ties, on each of them).
  const DTensor ties = dispatch("reduce_tie_mask", {x, c.outputs.at(0), dims, keepdim}).at(0);
  const DTensor count = sum(ties, dims, keepdim);
  return {mul(expand(div(g, count), x, dims, keepdim, 1.0), ties)};
}

OpDef reduction_def(const std::string& name) {
  OpDef d;
  d.name = name;
  d.validate = check_reduction;
  d.output_meta = reduction_meta;
  d.signatures = reduction_signatures;
  d.backward = reduction_backward;
  return d;
}

struct Registrar {
  Registrar() {
    for (const char* op : {"sum_dims", "mean_dims", "amax", "amin", "var"})
      register_op(reduction_def(op));
    register_op_handler("var", var_forward, false, {.defers_agreement = true});

    OpDef e;
    e.name = "reduce_expand";
    e.validate = check_expand;
    e.output_meta = expand_meta;
    e.signatures = expand_signatures;
    register_op(e);

    OpDef t;
    t.name = "reduce_tie_mask";
    t.validate = check_tie_mask;
    t.output_meta = tie_mask_meta;
    t.signatures = tie_mask_signatures;
    t.differentiable = false;  // a step function of its inputs
    register_op(t);
  }
};
const Registrar registrar;

// `name`: the function's name, which errors in `dims` carry.
DTensor reduce(const char* op, const char* name, const DTensor& x, const std::vector<Int>& dims,
               bool keepdim) {
  return dispatch(op, {x, resolve_dims(name, dims, x.spec().ndim()), keepdim}).at(0);
}

Int softmax_dim(const DTensor& x, Int dim, const char* op) {
  const Int nd = x.spec().ndim();
  check_arg(nd > 0 ? (dim >= -nd && dim < nd) : (dim == 0 || dim == -1), op,
            "dim: {} is out of range for a {}-d input", dim, nd);
  return nd == 0 ? 0 : (dim < 0 ? dim + nd : dim);
}

// x minus its max along dim (kept): the max is a constant of the result
// (softmax does not change when every element moves alike), so no gradient
// flows through it.
DTensor shifted(const DTensor& x, Int dim) {
  if (x.spec().ndim() == 0) return sub(x, x.detach());
  return sub(x, amax(x.detach(), {dim}, true));
}

}  // namespace

std::vector<Int> normalize_reduction_dims(const std::vector<Int>& dims, Int ndim) {
  return resolve_dims("ops", dims, ndim);
}

DTensor sum(const DTensor& x, const std::vector<Int>& dims, bool keepdim) {
  return reduce("sum_dims", "sum", x, dims, keepdim);
}
DTensor mean(const DTensor& x, const std::vector<Int>& dims, bool keepdim) {
  return reduce("mean_dims", "mean", x, dims, keepdim);
}
DTensor amax(const DTensor& x, const std::vector<Int>& dims, bool keepdim) {
  return reduce("amax", "amax", x, dims, keepdim);
}
DTensor amin(const DTensor& x, const std::vector<Int>& dims, bool keepdim) {
  return reduce("amin", "amin", x, dims, keepdim);
}
DTensor var(const DTensor& x, const std::vector<Int>& dims, double correction, bool keepdim) {
  return dispatch("var", {x, resolve_dims("var", dims, x.spec().ndim()), correction, keepdim})
      .at(0);
}

DTensor softmax(const DTensor& x, Int dim) {
  const Int d = softmax_dim(x, dim, "softmax");
  const DTensor e = exp(shifted(x, d));
  if (x.spec().ndim() == 0) return div(e, e);
  return div(e, sum(e, {d}, true));
}

DTensor log_softmax(const DTensor& x, Int dim) {
  const Int d = softmax_dim(x, dim, "log_softmax");
  const DTensor z = shifted(x, d);
  if (x.spec().ndim() == 0) return sub(z, z);
  return sub(z, natural_log(sum(exp(z), {d}, true)));
}

}  // namespace dtensor
