// reshape, permute, narrow and narrow_backward (flatten and transpose are
// front ends of reshape and permute), and the DTensor members that call them.
//
// Argument layouts (docs/operators.md):
//   reshape:         input, shape (resolved: no -1)
//   permute:         input, order (non-negative)
//   narrow:          input, dim, start (non-negative), length
//   narrow_backward: grad_output, input_shape, dim, start
//
// Each operator offers one strategy, derived from its input's placements by
// the rules of view_placements.h, so the only redistribution is the one a
// view cannot avoid (a sharded dim that must become whole). Their handlers
// compute locally: a view, the permute kernel, or a Tensor copy.
#include <numeric>

#include "dtensor/core/errors.h"
#include "dtensor/ops/dispatch.h"
#include "dtensor/ops/kernels/permute.h"
#include "dtensor/ops/views.h"
#include "ops/autograd/backward_helpers.h"
#include "ops/detail/agreed_front_end.h"
#include "ops/detail/local_result.h"
#include "ops/views/view_placements.h"

namespace dtensor {
namespace {

using Int = std::int64_t;

constexpr const char* kReshape = "reshape";
constexpr const char* kPermute = "permute";
constexpr const char* kNarrow = "narrow";
constexpr const char* kNarrowBackward = "narrow_backward";
// The handlers compute locally; they communicate only when their input is
// redistributed, which confirms dispatch's agreement check first.
constexpr HandlerOptions kLocalHandler{.defers_agreement = true};

// `dim` of a tensor of rank `ndim` made non-negative; `param` names it in the
// error. A 0-d tensor takes dims -1 and 0, as in torch.
Int normalized_dim(Int dim, Int ndim, const char* op, const char* param) {
  const Int n = std::max<Int>(ndim, 1);
  check_arg(dim >= -n && dim < n, op, "{}: dim {} is out of range for a tensor of rank {}", param,
            dim, ndim);
  return dim < 0 ? dim + n : dim;
}

std::vector<ShardingStrategy> one_strategy(std::vector<Placements> inputs, Placements output) {
  return {ShardingStrategy{std::move(inputs), {std::move(output)}}};
}

std::vector<TensorMeta> one_output(Shape shape, DType dtype) {
  return {TensorMeta{std::move(shape), dtype}};
}

// The handlers' common part: the (redistributed) input's local tensor, the
// output spec, and the wrapped result.
template <typename Local>
OpHandler local_handler(const char* op, Local local) {
  return [op, local](OpCall& call) {
    const auto inputs = call.redistributed_inputs();
    const DTensorSpec& spec = call.sharding().output_specs[0];
    return std::vector<DTensor>{
        detail::wrap_checked(local(call.schema(), inputs[0].to_local(), spec), spec, op)};
  };
}

// A copy of `t` when it shares storage with `of`: narrow's results are fresh
// tensors, as cat_backward's pieces are.
Tensor unshared(Tensor t, const Tensor& of) {
  t = t.contiguous();
  return t.shares_storage_with(of) ? t.clone() : t;
}

// ---- reshape ----

void check_reshape(const OpSchema& s) {
  DTENSOR_CHECK_ARG(s.size() == 2, kReshape, "{} arguments given, 2 expected", s.size());
  const DTensor& x = s.dtensor(0);
  const IntList& shape = s.int_list(1);
  for (const Int n : shape)
    DTENSOR_CHECK_ARG(n >= 0, kReshape, "shape: negative size {} in {}", n, shape_str(shape));
  DTENSOR_CHECK_ARG(shape_numel(shape) == shape_numel(x.shape()), kReshape,
                    "shape: {} is invalid for an input of shape {} ({} elements)", shape_str(shape),
                    shape_str(x.shape()), shape_numel(x.shape()));
}

Tensor local_reshape(const OpSchema&, const Tensor& x, const DTensorSpec& spec) {
  // A view of the input's memory when it is contiguous, as torch's reshape.
  return x.contiguous().view(spec.local_shape());
}

// ---- permute ----

void check_order(const IntList& order, Int ndim, const char* op) {
  DTENSOR_CHECK_ARG(static_cast<Int>(order.size()) == ndim, op,
                    "order: {} entries for a tensor of rank {} (one per dim)", order.size(), ndim);
  std::vector<bool> seen(order.size(), false);
  for (const Int d : order) {
    check_arg(d >= 0 && d < ndim, op, "order: dim {} is out of range for a tensor of rank {}", d,
              ndim);
    check_arg(!seen[static_cast<std::size_t>(d)], op, "order: dim {} is repeated", d);
    seen[static_cast<std::size_t>(d)] = true;
  }
}

void check_permute(const OpSchema& s) {
  DTENSOR_CHECK_ARG(s.size() == 2, kPermute, "{} arguments given, 2 expected", s.size());
  check_order(s.int_list(1), s.dtensor(0).ndim(), kPermute);
}

Shape permuted(const Shape& shape, const IntList& order) {
  Shape out;
  for (const Int d : order)
    out.push_back(shape[static_cast<std::size_t>(d)]);
  return out;
}

IntList inverse(const IntList& order) {
  IntList inv(order.size());
  for (std::size_t k = 0; k < order.size(); ++k)
    inv[static_cast<std::size_t>(order[k])] = static_cast<Int>(k);
  return inv;
}

Tensor local_permute(const OpSchema& s, const Tensor& x, const DTensorSpec& spec) {
  Tensor y = Tensor::empty(spec.local_shape(), x.dtype(), x.device());
  run_kernel(kernels::kPermute, x.device().type, x.dtype(),
             kernels::PermuteArgs{x.contiguous(), y, s.int_list(1)});
  return y;
}

// ---- narrow and its backward ----

// (dim, start, length) at `at` against a dim of `size`; the front end has
// made dim and start non-negative.
void check_range(const OpSchema& s, std::size_t at, const Shape& shape, Int length,
                 const char* op) {
  const Int dim = s.int_value(at), start = s.int_value(at + 1);
  DTENSOR_CHECK_ARG(dim >= 0 && dim < static_cast<Int>(shape.size()), op,
                    "dim: {} is out of range for a tensor of rank {}", dim, shape.size());
  const Int size = shape[static_cast<std::size_t>(dim)];
  check_arg(start >= 0 && start <= size, op, "start: {} is out of range for dim {} of size {}",
            start, dim, size);
  check_arg(length >= 0, op, "length: must be non-negative, got {}", length);
  check_arg(start + length <= size, op,
            "length: start ({}) + length ({}) exceeds dim {} of size {}", start, length, dim, size);
}

void check_narrow(const OpSchema& s) {
  DTENSOR_CHECK_ARG(s.size() == 4, kNarrow, "{} arguments given, 4 expected", s.size());
  const DTensor& x = s.dtensor(0);
  check_arg(x.ndim() >= 1, kNarrow, "input: narrow needs a tensor of rank >= 1");
  check_range(s, 1, x.shape(), s.int_value(3), kNarrow);
}

Shape narrowed(const OpSchema& s) {
  Shape shape = s.dtensor(0).shape();
  shape[static_cast<std::size_t>(s.int_value(1))] = s.int_value(3);
  return shape;
}

Tensor local_narrow(const OpSchema& s, const Tensor& x, const DTensorSpec&) {
  return unshared(x.narrow(s.int_value(1), s.int_value(2), s.int_value(3)), x);
}

void check_narrow_backward(const OpSchema& s) {
  DTENSOR_CHECK_ARG(s.size() == 4, kNarrowBackward, "{} arguments given, 4 expected", s.size());
  const DTensor& g = s.dtensor(0);
  const IntList& shape = s.int_list(1);
  DTENSOR_CHECK_ARG(g.ndim() == static_cast<Int>(shape.size()), kNarrowBackward,
                    "input_shape: rank {} differs from grad_output's {}", shape.size(), g.ndim());
  const Int dim = s.int_value(2);
  DTENSOR_CHECK_ARG(dim >= 0 && dim < g.ndim(), kNarrowBackward,
                    "dim: {} is out of range for a tensor of rank {}", dim, g.ndim());
  for (Int d = 0; d < g.ndim(); ++d)
    DTENSOR_CHECK_ARG(
        d == dim || g.shape()[static_cast<std::size_t>(d)] == shape[static_cast<std::size_t>(d)],
        kNarrowBackward, "input_shape: {} differs from grad_output's {} outside dim {}",
        shape_str(shape), shape_str(g.shape()), dim);
  check_range(s, 2, shape, g.shape()[static_cast<std::size_t>(dim)], kNarrowBackward);
}

Tensor local_narrow_backward(const OpSchema& s, const Tensor& g, const DTensorSpec& spec) {
  // The narrowed dim is whole on every rank (the strategy replicates it).
  Tensor out = Tensor::zeros(spec.local_shape(), g.dtype(), g.device());
  const Int dim = s.int_value(2);
  if (g.numel() > 0) out.narrow(dim, s.int_value(3), g.size(dim)).copy_(g);
  return out;
}

struct Registrar {
  Registrar() {
    OpDef reshape_def;
    reshape_def.name = kReshape;
    reshape_def.validate = check_reshape;
    reshape_def.output_meta = [](const OpSchema& s) {
      return one_output(s.int_list(1), s.dtensor(0).dtype());
    };
    reshape_def.strategies = [](const OpSchema& s) {
      auto v = detail::reshape_placements(s.dtensor(0).spec(), s.int_list(1));
      return one_strategy({v.input}, v.output);
    };
    reshape_def.backward = [](const BackwardCall& c) {
      std::vector<std::optional<DTensor>> g(1);
      if (c.needs_input_grad.at(0))
        g[0] = dispatch(kReshape, {autograd::detail::grad_of_output(c),
                                   IntList(c.forward.dtensor(0).shape())})
                   .at(0);
      return g;
    };
    register_op(reshape_def);
    register_op_handler(kReshape, local_handler(kReshape, local_reshape), false, kLocalHandler);

    OpDef permute_def;
    permute_def.name = kPermute;
    permute_def.validate = check_permute;
    permute_def.output_meta = [](const OpSchema& s) {
      return one_output(permuted(s.dtensor(0).shape(), s.int_list(1)), s.dtensor(0).dtype());
    };
    permute_def.strategies = [](const OpSchema& s) {
      auto v = detail::permute_placements(s.dtensor(0).placements(), s.int_list(1));
      return one_strategy({v.input}, v.output);
    };
    permute_def.backward = [](const BackwardCall& c) {
      std::vector<std::optional<DTensor>> g(1);
      if (c.needs_input_grad.at(0))
        g[0] = dispatch(kPermute,
                        {autograd::detail::grad_of_output(c), inverse(c.forward.int_list(1))})
                   .at(0);
      return g;
    };
    register_op(permute_def);
    register_op_handler(kPermute, local_handler(kPermute, local_permute), false, kLocalHandler);

    OpDef narrow_def;
    narrow_def.name = kNarrow;
    narrow_def.validate = check_narrow;
    narrow_def.output_meta = [](const OpSchema& s) {
      return one_output(narrowed(s), s.dtensor(0).dtype());
    };
    narrow_def.strategies = [](const OpSchema& s) {
      auto v = detail::narrow_placements(s.dtensor(0).placements(), s.int_value(1));
      return one_strategy({v.input}, v.output);
    };
    narrow_def.backward = [](const BackwardCall& c) {
      std::vector<std::optional<DTensor>> g(1);
      if (c.needs_input_grad.at(0))
        g[0] = dispatch(kNarrowBackward,
                        {autograd::detail::grad_of_output(c), IntList(c.forward.dtensor(0).shape()),
                         c.forward.int_value(1), c.forward.int_value(2)})
                   .at(0);
      return g;
    };
    register_op(narrow_def);
    register_op_handler(kNarrow, local_handler(kNarrow, local_narrow), false, kLocalHandler);

    OpDef narrow_backward_def;
    narrow_backward_def.name = kNarrowBackward;
    narrow_backward_def.validate = check_narrow_backward;
    narrow_backward_def.output_meta = [](const OpSchema& s) {
      return one_output(s.int_list(1), s.dtensor(0).dtype());
    };
    narrow_backward_def.strategies = [](const OpSchema& s) {
      auto v = detail::narrow_placements(s.dtensor(0).placements(), s.int_value(2));
      return one_strategy({v.input}, v.output);
    };
    // Linear in grad_output: its gradient is narrow's.
    narrow_backward_def.backward = [](const BackwardCall& c) {
      std::vector<std::optional<DTensor>> g(1);
      if (c.needs_input_grad.at(0)) {
        const Int dim = c.forward.int_value(2);
        const Int length = c.forward.dtensor(0).shape()[static_cast<std::size_t>(dim)];
        g[0] = dispatch(kNarrow,
                        {autograd::detail::grad_of_output(c), dim, c.forward.int_value(3), length})
                   .at(0);
      }
      return g;
    };
    register_op(narrow_backward_def);
    register_op_handler(kNarrowBackward, local_handler(kNarrowBackward, local_narrow_backward),
                        false, kLocalHandler);
  }
};
const Registrar registrar;

}  // namespace

Shape resolved_reshape_shape(const Shape& input_shape, const Shape& shape) {
  Int known = 1, inferred_at = -1;
  for (std::size_t k = 0; k < shape.size(); ++k) {
    const Int n = shape[k];
    if (n == -1) {
      DTENSOR_CHECK_ARG(inferred_at < 0, kReshape, "shape: only one dim can be -1, got {}",
                        shape_str(shape));
      inferred_at = static_cast<Int>(k);
      continue;
    }
    DTENSOR_CHECK_ARG(n >= 0, kReshape, "shape: invalid size {} in {}", n, shape_str(shape));
    known *= n;
  }
  const Int numel = shape_numel(input_shape);
  Shape out = shape;
  if (inferred_at >= 0) {
    DTENSOR_CHECK_ARG(known != 0 && numel % known == 0, kReshape,
                      "shape: {} is invalid for an input of shape {} ({} elements)",
                      shape_str(shape), shape_str(input_shape), numel);
    out[static_cast<std::size_t>(inferred_at)] = numel / known;
  }
  DTENSOR_CHECK_ARG(shape_numel(out) == numel, kReshape,
                    "shape: {} is invalid for an input of shape {} ({} elements)", shape_str(shape),
                    shape_str(input_shape), numel);
  return out;
}

std::vector<Int> resolved_permute_order(Int ndim, const std::vector<Int>& order) {
  DTENSOR_CHECK_ARG(static_cast<Int>(order.size()) == ndim, kPermute,
                    "order: {} entries for a tensor of rank {} (one per dim)", order.size(), ndim);
  IntList out;
  for (const Int d : order)
    out.push_back(normalized_dim(d, ndim, kPermute, "order"));
  check_order(out, ndim, kPermute);
  return out;
}

std::pair<Int, Int> resolved_flatten_dims(Int ndim, Int start_dim, Int end_dim) {
  const Int s = normalized_dim(start_dim, ndim, "flatten", "start_dim");
  const Int e = normalized_dim(end_dim, ndim, "flatten", "end_dim");
  check_arg(s <= e, "flatten", "start_dim: {} comes after end_dim {}", start_dim, end_dim);
  return {s, e};
}

DTensor reshape(const DTensor& input, const Shape& shape) {
  const Shape resolved = detail::agreed_front_end(
      input.mesh(), kReshape, [&] { return resolved_reshape_shape(input.shape(), shape); });
  return dispatch(kReshape, {input, IntList(resolved)}).at(0);
}

DTensor flatten(const DTensor& input, Int start_dim, Int end_dim) {
  const auto [s, e] = detail::agreed_front_end(input.mesh(), "flatten", [&] {
    return resolved_flatten_dims(input.ndim(), start_dim, end_dim);
  });
  const Shape& in = input.shape();
  Shape shape;
  if (in.empty()) {
    shape = {1};
  } else {
    shape.assign(in.begin(), in.begin() + s);
    shape.push_back(
        std::accumulate(in.begin() + s, in.begin() + e + 1, Int{1}, std::multiplies<>()));
    shape.insert(shape.end(), in.begin() + e + 1, in.end());
  }
  return dispatch(kReshape, {input, IntList(shape)}).at(0);
}

DTensor permute(const DTensor& input, const std::vector<Int>& order) {
  const IntList resolved = detail::agreed_front_end(
      input.mesh(), kPermute, [&] { return resolved_permute_order(input.ndim(), order); });
  return dispatch(kPermute, {input, resolved}).at(0);
}

DTensor transpose(const DTensor& input, Int dim0, Int dim1) {
  const auto [a, b] = detail::agreed_front_end(input.mesh(), "transpose", [&] {
    return std::pair{normalized_dim(dim0, input.ndim(), "transpose", "dim0"),
                     normalized_dim(dim1, input.ndim(), "transpose", "dim1")};
  });
  IntList order(static_cast<std::size_t>(input.ndim()));
  std::iota(order.begin(), order.end(), Int{0});
  if (input.ndim() > 0)
    std::swap(order[static_cast<std::size_t>(a)], order[static_cast<std::size_t>(b)]);
  return dispatch(kPermute, {input, order}).at(0);
}

DTensor narrow(const DTensor& input, Int dim, Int start, Int length) {
  const auto [d, s] = detail::agreed_front_end(input.mesh(), kNarrow, [&] {
    check_arg(input.ndim() >= 1, kNarrow, "input: narrow needs a tensor of rank >= 1");
    const Int dd = normalized_dim(dim, input.ndim(), kNarrow, "dim");
    const Int size = input.shape()[static_cast<std::size_t>(dd)];
    check_arg(start >= -size && start <= size, kNarrow,
              "start: {} is out of range for dim {} of size {}", start, dd, size);
    return std::pair{dd, start < 0 ? start + size : start};
  });
  return dispatch(kNarrow, {input, d, s, length}).at(0);
}

DTensor narrow_backward(const DTensor& grad_output, const Shape& input_shape, Int dim, Int start) {
  const auto [d, s] = detail::agreed_front_end(grad_output.mesh(), kNarrowBackward, [&] {
    const Int dd = normalized_dim(dim, grad_output.ndim(), kNarrowBackward, "dim");
    DTENSOR_CHECK_ARG(input_shape.size() == grad_output.shape().size(), kNarrowBackward,
                      "input_shape: rank {} differs from grad_output's {}", input_shape.size(),
                      grad_output.ndim());
    const Int size = input_shape[static_cast<std::size_t>(dd)];
    return std::pair{dd, start < 0 ? start + size : start};
  });
  return dispatch(kNarrowBackward, {grad_output, IntList(input_shape), d, s}).at(0);
}

// The DTensor members: declared with the class (placement/), defined here
// with the operators they call, as the layers' objects make one library.
DTensor DTensor::reshape(const Shape& shape) const {
  return dtensor::reshape(*this, shape);
}
DTensor DTensor::flatten(Int start_dim, Int end_dim) const {
  return dtensor::flatten(*this, start_dim, end_dim);
}
DTensor DTensor::permute(const std::vector<Int>& order) const {
  return dtensor::permute(*this, order);
}
DTensor DTensor::transpose(Int dim0, Int dim1) const {
  return dtensor::transpose(*this, dim0, dim1);
}
DTensor DTensor::narrow(Int dim, Int start, Int length) const {
  return dtensor::narrow(*this, dim, start, length);
}

}  // namespace dtensor
