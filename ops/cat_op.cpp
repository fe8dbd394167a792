// cat and cat_backward.
//
// Argument layouts (docs/operators.md):
//   cat:          input_0, ..., input_{n-1} (DTensors), dim
//   cat_backward: grad_output, sizes (the inputs' sizes along dim), dim
//                 -> n outputs
//
// Strategies (per mesh dim, every input and output alike): Shard(d) for every
// d but the cat dim, Replicate, Partial (cat and its split are linear). An
// input sharded along the cat dim, or inputs placed differently, have no
// matching row as they are: the propagator picks the cheapest common one.
#include "dtensor/core/errors.h"
#include "dtensor/ops/cat.h"
#include "dtensor/ops/dispatch.h"
#include "dtensor/ops/typed_call.h"
#include "ops/autograd/backward_helpers.h"
#include "ops/detail/agreed_front_end.h"
#include "ops/detail/local_result.h"
#include "ops/detail/op_pair.h"

namespace dtensor {
namespace {

constexpr const char* kOp = "cat";
constexpr const char* kBackward = "cat_backward";

std::int64_t normalized_dim(std::int64_t dim, std::int64_t ndim, const char* op) {
  check_arg(ndim >= 1, op, "input: cat needs tensors of rank >= 1 (got a 0-d tensor)");
  check_arg(dim >= -ndim && dim < ndim, op, "dim: {} is out of range for tensors of rank {}", dim,
            ndim);
  return dim < 0 ? dim + ndim : dim;
}

std::vector<ShardingSignature> signatures(std::size_t n_in, std::size_t n_out, std::int64_t ndim,
                                          std::int64_t cat_dim) {
  std::vector<ShardingSignature> sigs;
  auto add = [&](const Placement& p) {
    sigs.push_back({Placements(n_in, p), Placements(n_out, p)});
  };
  for (std::int64_t d = 0; d < ndim; ++d)
    if (d != cat_dim) add(Shard(d));
  add(Replicate());
  add(Partial());
  return sigs;
}

// ---- cat ----

struct CatCall {
  std::vector<const DTensor*> inputs;
  std::int64_t dim = 0;  // as given

  /// The call `s` holds, decoded once per schema: every stage shares it.
  static const CatCall& of(const OpSchema& s) {
    return decoded<CatCall>(s, [&] { return decode(s); });
  }
  static CatCall decode(const OpSchema& s) {
    CatCall c;
    check_arg(s.size() >= 2, kOp, "input: cat takes DTensors and a dim");
    for (std::size_t i = 0; i + 1 < s.size(); ++i)
      c.inputs.push_back(&s.dtensor(i));
    c.dim = s.int_value(s.size() - 1);
    return c;
  }
  std::int64_t cat_dim() const { return normalized_dim(dim, inputs[0]->ndim(), kOp); }
};

void check_cat(const CatCall& c) {
  const DTensor& a = *c.inputs[0];
  const std::int64_t d = c.cat_dim();
  for (std::size_t i = 1; i < c.inputs.size(); ++i) {
    const DTensor& b = *c.inputs[i];
    DTENSOR_CHECK_ARG(b.dtype() == a.dtype(), kOp, "input {}: dtype {} differs from input 0's {}",
                      i, dtype_name(b.dtype()), dtype_name(a.dtype()));
    DTENSOR_CHECK_ARG(b.ndim() == a.ndim(), kOp, "input {}: rank {} differs from input 0's {}", i,
                      b.ndim(), a.ndim());
    for (std::int64_t k = 0; k < a.ndim(); ++k)
      DTENSOR_CHECK_ARG(
          k == d ||
              a.shape()[static_cast<std::size_t>(k)] == b.shape()[static_cast<std::size_t>(k)],
          kOp,
          "input {}: shape {} differs from input 0's {} along dim {} (only the cat dim {} "
          "may differ)",
          i, shape_str(b.shape()), shape_str(a.shape()), k, d);
  }
}

Tensor local_cat(const std::vector<Tensor>& parts, std::int64_t dim) {
  Shape shape = parts.at(0).shape();
  shape[static_cast<std::size_t>(dim)] = 0;
  for (const Tensor& t : parts)
    shape[static_cast<std::size_t>(dim)] += t.size(dim);
  Tensor out = Tensor::empty(shape, parts[0].dtype(), parts[0].device());
  std::int64_t at = 0;
  for (const Tensor& t : parts) {
    const std::int64_t n = t.size(dim);
    if (n > 0 && t.numel() > 0) out.narrow(dim, at, n).copy_(t);
    at += n;
  }
  return out;
}

std::vector<DTensor> cat_handler(OpCall& call) {
  const CatCall& c = CatCall::of(call.schema());
  const std::int64_t d = c.cat_dim();
  const auto inputs = call.redistributed_inputs();
  std::vector<Tensor> parts;
  for (const DTensor& x : inputs)
    parts.push_back(x.to_local());
  const DTensorSpec& spec = call.sharding().output_specs[0];
  return {detail::wrap_checked(local_cat(parts, d), spec, kOp)};
}

// ---- cat_backward ----

struct SplitCall {
  const DTensor& grad_output;
  IntList sizes;
  std::int64_t dim = 0;

  /// The call `s` holds, decoded once per schema: every stage shares it.
  static const SplitCall& of(const OpSchema& s) {
    return decoded<SplitCall>(s, [&] { return decode(s); });
  }
  static SplitCall decode(const OpSchema& s) {
    return {s.dtensor(0), s.int_list(1), s.int_value(2)};
  }
  std::int64_t cat_dim() const { return normalized_dim(dim, grad_output.ndim(), kBackward); }
};

void check_split(const SplitCall& c) {
  const std::int64_t d = c.cat_dim();
  check_arg(!c.sizes.empty(), kBackward, "sizes: at least one piece");
  std::int64_t total = 0;
  for (auto n : c.sizes) {
    check_arg(n >= 0, kBackward, "sizes: negative size {}", n);
    total += n;
  }
  DTENSOR_CHECK_ARG(total == c.grad_output.shape()[static_cast<std::size_t>(d)], kBackward,
                    "sizes: they add up to {} but grad_output {} has {} along dim {}", total,
                    shape_str(c.grad_output.shape()),
                    c.grad_output.shape()[static_cast<std::size_t>(d)], d);
}

std::vector<DTensor> split_handler(OpCall& call) {
  const SplitCall& c = SplitCall::of(call.schema());
  const std::int64_t d = c.cat_dim();
  const auto inputs = call.redistributed_inputs();
  const Tensor& g = inputs[0].to_local();
  const auto& specs = call.sharding().output_specs;
  std::vector<DTensor> out;
  std::int64_t at = 0;
  for (std::size_t i = 0; i < c.sizes.size(); ++i) {
    Tensor piece = g.narrow(d, at, c.sizes[i]).contiguous();
    if (piece.shares_storage_with(g)) piece = piece.clone();
    at += c.sizes[i];
    DTENSOR_CHECK_ARG(piece.shape() == specs[i].local_shape(), kBackward,
                      "internal: local piece {} but the spec {} needs {}", shape_str(piece.shape()),
                      specs[i].str(), shape_str(specs[i].local_shape()));
    out.emplace_back(std::move(piece), specs[i]);
  }
  return out;
}

struct Registrar {
  Registrar() {
    OpDef fwd;
    fwd.name = kOp;
    fwd.validate = [](const OpSchema& s) { check_cat(CatCall::of(s)); };
    fwd.output_meta = [](const OpSchema& s) {
      const CatCall& c = CatCall::of(s);
      const std::int64_t d = c.cat_dim();
      Shape shape = c.inputs[0]->shape();
      shape[static_cast<std::size_t>(d)] = 0;
      for (const DTensor* x : c.inputs)
        shape[static_cast<std::size_t>(d)] += x->shape()[static_cast<std::size_t>(d)];
      return std::vector<TensorMeta>{{shape, c.inputs[0]->dtype()}};
    };
    fwd.signatures = [](const OpSchema& s) {
      const CatCall& c = CatCall::of(s);
      return signatures(c.inputs.size(), 1, c.inputs[0]->ndim(), c.cat_dim());
    };
    // Each input's gradient is its piece of grad_output (the engine places
    // it like the input).
    fwd.backward = [](const BackwardCall& c) {
      const CatCall& f = CatCall::of(c.forward);
      IntList sizes;
      for (const DTensor* x : f.inputs)
        sizes.push_back(x->shape()[static_cast<std::size_t>(f.cat_dim())]);
      auto pieces = dispatch(kBackward, {autograd::detail::grad_of_output(c), sizes, f.cat_dim()});
      return std::vector<std::optional<DTensor>>(pieces.begin(), pieces.end());
    };

    OpDef bwd;
    bwd.name = kBackward;
    bwd.validate = [](const OpSchema& s) { check_split(SplitCall::of(s)); };
    bwd.output_meta = [](const OpSchema& s) {
      const SplitCall& c = SplitCall::of(s);
      const std::int64_t d = c.cat_dim();
      std::vector<TensorMeta> metas;
      for (auto n : c.sizes) {
        Shape shape = c.grad_output.shape();
        shape[static_cast<std::size_t>(d)] = n;
        metas.push_back({shape, c.grad_output.dtype()});
      }
      return metas;
    };
    bwd.signatures = [](const OpSchema& s) {
      const SplitCall& c = SplitCall::of(s);
      return signatures(1, c.sizes.size(), c.grad_output.ndim(), c.cat_dim());
    };
    // Both compute locally; they communicate only when their inputs are
    // redistributed, which confirms the agreement first, so the deferred
    // check is confirmed after their copies rather than before.
    detail::register_op_pair({std::move(fwd), std::move(bwd), cat_handler, split_handler});
  }
};
const Registrar registrar;

}  // namespace

DTensor cat(const std::vector<DTensor>& inputs, std::int64_t dim) {
  check_arg(!inputs.empty(), kOp, "input: cat needs at least one tensor");
  const std::int64_t d = detail::agreed_front_end(
      inputs[0].mesh(), kOp, [&] { return normalized_dim(dim, inputs[0].ndim(), kOp); });
  std::vector<OpArg> args(inputs.begin(), inputs.end());
  args.emplace_back(d);
  return dispatch(kOp, std::move(args)).at(0);
}

std::vector<DTensor> cat_backward(const DTensor& grad_output,
                                  const std::vector<std::int64_t>& sizes, std::int64_t dim) {
  const std::int64_t d = detail::agreed_front_end(grad_output.mesh(), kBackward, [&] {
    return normalized_dim(dim, grad_output.ndim(), kBackward);
  });
  return dispatch(kBackward, {grad_output, IntList(sizes), d});
}

std::vector<DTensor> cat_backward(const DTensor& grad_output, const std::vector<DTensor>& inputs,
                                  std::int64_t dim) {
  const IntList sizes = detail::agreed_front_end(grad_output.mesh(), kBackward, [&] {
    const std::int64_t d = normalized_dim(dim, grad_output.ndim(), kBackward);
    IntList out;
    for (const DTensor& x : inputs) {
      DTENSOR_CHECK_ARG(x.ndim() == grad_output.ndim(), kBackward,
                        "input: rank {} differs from grad_output's {}", x.ndim(),
                        grad_output.ndim());
      out.push_back(x.shape()[static_cast<std::size_t>(d)]);
    }
    return out;
  });
  auto pieces = cat_backward(grad_output, sizes, dim);
  // Placed exactly like each input, but where the input is Partial: the
  // gradient of each pending term is the whole gradient, in whatever
  // placement it was computed.
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    Placements target = inputs[i].placements();
    for (std::size_t m = 0; m < target.size(); ++m)
      if (target[m].is_partial()) target[m] = pieces[i].placements()[m];
    if (target != pieces[i].placements())
      pieces[i] = pieces[i].redistribute(pieces[i].mesh(), target);
  }
  return pieces;
}

}  // namespace dtensor
