// cross_entropy with class-index targets (F.cross_entropy's ignore_index and
// label_smoothing), forward and backward, and the CrossEntropyOptions front
// ends (which send probability targets to loss_ops.cpp's cross_entropy).
//
// Argument layouts (docs/operators.md):
//   cross_entropy_indices:          input, target, reduction ("mean"|"sum"),
//                                   ignore_index (int), label_smoothing (double)
//   cross_entropy_indices_backward: the same, then grad (double)
// input [N, C, d1, ...] floating; target [N, d1, ...] I64.
//
// Strategies (per mesh dim): Shard(0) with the target's Shard(0), Shard(d)
// with the target's Shard(d - 1) for d >= 2, Replicate with Replicate; dim 1
// (the classes) is never sharded and a Partial input is reduced first. The
// handler counts the target on each rank (kernels::kClassIndexCount), and
// the forward sums its shard's losses; one record per rank, (sum, counted,
// out of range, smallest and largest out-of-range index), is all-gathered
// over each mesh dim that shards the input and merged in rank order, so
// every rank holds the same totals: the mean's count, and the out-of-range
// indices that every rank then refuses alike, wherever they lay. The
// forward's result is then whole (Replicate); the backward's is placed like
// its input.
#include "dtensor/core/errors.h"
#include "dtensor/ops/dispatch.h"
#include "dtensor/ops/kernels/loss.h"
#include "dtensor/ops/losses.h"
#include "dtensor/ops/pointwise.h"
#include "dtensor/ops/typed_call.h"
#include "ops/autograd/backward_helpers.h"
#include "ops/detail/agreed_front_end.h"
#include "ops/detail/placed_like_input.h"

namespace dtensor {
namespace {

constexpr const char* kForward = "cross_entropy_indices";
constexpr const char* kBackward = "cross_entropy_indices_backward";

struct IndexCall {
  bool backward = false;
  const DTensor& input;
  const DTensor& target;
  bool mean = true;
  std::int64_t ignore_index = -100;
  double label_smoothing = 0.0;
  double grad = 1.0;

  std::size_t arity() const { return backward ? 6 : 5; }

  /// The call `s` holds, decoded once per schema: every stage shares it.
  static const IndexCall& of(const OpSchema& s) {
    return decoded<IndexCall>(s, [&] { return decode(s); });
  }
  static IndexCall decode(const OpSchema& s) {
    const bool bw = s.op() == kBackward;
    DTENSOR_CHECK_ARG(s.size() == (bw ? 6U : 5U), s.op(), "{} arguments given, {} expected",
                      s.size(), bw ? 6 : 5);
    IndexCall c{bw, s.dtensor(0), s.dtensor(1)};
    const std::string& r = s.text(2);
    check_arg(r == "mean" || r == "sum", s.op(),
              "reduction: \"mean\" or \"sum\" expected, got \"{}\"", r);
    c.mean = r == "mean";
    c.ignore_index = s.int_value(3);
    c.label_smoothing = s.scalar(4);
    if (bw) c.grad = s.scalar(5);
    return c;
  }
};

// The target's shape for an input [N, C, d1, ...]: [N, d1, ...].
Shape target_shape(const Shape& input) {
  Shape t = input;
  t.erase(t.begin() + 1);
  return t;
}

void check_indices(const OpSchema& s) {
  const IndexCall& c = IndexCall::of(s);
  DTENSOR_CHECK_ARG(is_floating(c.input.dtype()), s.op(),
                    "input: {} is not a floating dtype (f32, f64, bf16 or f16)",
                    dtype_name(c.input.dtype()));
  DTENSOR_CHECK_ARG(c.input.ndim() >= 2, s.op(),
                    "input: expected [N, C, d1, ...] (class dim 1), got shape {}",
                    shape_str(c.input.shape()));
  DTENSOR_CHECK_ARG(c.input.shape()[1] >= 1, s.op(), "input: no classes (dim 1 is empty) in {}",
                    shape_str(c.input.shape()));
  DTENSOR_CHECK_ARG(c.target.dtype() == DType::I64, s.op(),
                    "target: class indices are i64, got {} (class probabilities are of the "
                    "input's shape and dtype)",
                    dtype_name(c.target.dtype()));
  DTENSOR_CHECK_ARG(c.target.shape() == target_shape(c.input.shape()), s.op(),
                    "target: shape {} is not the input's {} without its class dim 1 ({})",
                    shape_str(c.target.shape()), shape_str(c.input.shape()),
                    shape_str(target_shape(c.input.shape())));
  for (const Placement& p : c.target.placements())
    DTENSOR_CHECK_ARG(!p.is_partial(), s.op(),
                      "target: placements {}: a Partial target holds pending sums, not class "
                      "indices",
                      placements_str(c.target.placements()));
  // PyTorch's bound ("label_smoothing must be between 0.0 and 1.0").
  DTENSOR_CHECK_ARG(c.label_smoothing >= 0.0 && c.label_smoothing <= 1.0, s.op(),
                    "label_smoothing: must be between 0.0 and 1.0, got {}", c.label_smoothing);
}

std::vector<TensorMeta> indices_meta(const OpSchema& s) {
  const IndexCall& c = IndexCall::of(s);
  if (c.backward) return {{c.input.shape(), c.input.dtype()}};
  return {{{}, c.input.dtype()}};
}

std::vector<ShardingSignature> indices_signatures(const OpSchema& s) {
  const IndexCall& c = IndexCall::of(s);
  std::vector<ShardingSignature> sigs;
  for (std::int64_t d = 0; d < c.input.ndim(); ++d) {
    if (d == 1) continue;
    const std::int64_t td = d == 0 ? 0 : d - 1;
    sigs.push_back({{Shard(d), Shard(td)}, {c.backward ? Placement(Shard(d)) : Partial()}});
  }
  sigs.push_back({{Replicate(), Replicate()}, {Replicate()}});
  return sigs;
}

// One rank's record, then the merged one: see the file's comment.
using Record = kernels::ClassIndexRecordsMergeArgs;

// Merges every rank's record over each mesh dim that shards the input (the
// ranks along the others hold the same data), in rank order on every rank.
void merge_records(OpCall& call, const Placements& input, Tensor& record) {
  for (std::size_t m = 0; m < input.size(); ++m) {
    if (!input[m].is_shard()) continue;
    ProcessGroup& group = call.group(static_cast<std::int64_t>(m));
    if (group.size() == 1) continue;
    Tensor all = Tensor::empty({group.size() * Record::kFields}, DType::F64);
    group.allgather(
        record, all,
        std::vector<std::int64_t>(static_cast<std::size_t>(group.size()), Record::kFields));
    run_kernel(kernels::kClassIndexRecordsMerge, DeviceType::CPU, DType::F64,
               kernels::ClassIndexRecordsMergeArgs{all, record});
  }
}

std::vector<DTensor> indices_handler(OpCall& call) {
  const OpSchema& s = call.schema();
  const IndexCall& c = IndexCall::of(s);
  const auto inputs = call.redistributed_inputs();
  const Tensor x = inputs[0].to_local().contiguous();
  const Tensor t = inputs[1].to_local().contiguous();
  const std::int64_t classes = c.input.shape()[1];

  Tensor counts = Tensor::empty({4}, DType::F64);
  run_kernel(kernels::kClassIndexCount, t.device().type, DType::I64,
             {t, classes, c.ignore_index, counts});
  Tensor record = Tensor::zeros({Record::kFields}, DType::F64);
  record.narrow(0, Record::kCounted, 4).copy_(counts);
  if (!c.backward) {
    Tensor sum = Tensor::empty({}, DType::F64);
    run_kernel(kernels::kCrossEntropyIndices, x.device().type, x.dtype(),
               {x, t, c.ignore_index, c.label_smoothing, sum});
    record.narrow(0, Record::kSum, 1).copy_(sum.view({1}));
  }
  merge_records(call, inputs[0].placements(), record);

  const double* r = record.data<double>();
  if (r[Record::kOutOfRange] > 0)
    throw InvalidArgument(
        s.op(), fmt::format("target: {} class {} outside [0, {}) and not "
                            "ignore_index ({}): from {} to {}",
                            r[Record::kOutOfRange],
                            r[Record::kOutOfRange] == 1 ? "index lies" : "indices lie", classes,
                            c.ignore_index, r[Record::kSmallest], r[Record::kLargest]));
  // The mean divides by the positions counted on every rank (NaN for none, as PyTorch).
  const double denominator = c.mean ? r[Record::kCounted] : 1.0;
  if (!c.backward) {
    const Placements whole(static_cast<std::size_t>(s.mesh().ndim()), Replicate());
    const Tensor out = Tensor::full({}, r[Record::kSum] / denominator, x.dtype(), x.device());
    return {DTensor(out, DTensorSpec(s.mesh(), whole, {}, x.dtype()))};
  }
  Tensor g = Tensor::empty(x.shape(), x.dtype(), x.device());
  run_kernel(kernels::kCrossEntropyIndicesBackward, x.device().type, x.dtype(),
             {x, t, c.ignore_index, c.label_smoothing, c.grad / denominator, g});
  return {DTensor(g, call.sharding().output_specs.at(0))};
}

double scalar_of(const DTensor& grad_output, const char* op) {
  DTENSOR_CHECK_ARG(grad_output.ndim() == 0, op,
                    "grad_output: the loss's gradient is a scalar, got shape {}",
                    shape_str(grad_output.shape()));
  const Placements all(static_cast<std::size_t>(grad_output.mesh().ndim()), Replicate());
  const DTensor whole = grad_output.placements() == all
                            ? grad_output
                            : grad_output.redistribute(grad_output.mesh(), all);
  return whole.to_local().item_flat(0);
}

// The gradient of a cross_entropy_indices call: its _backward operator with
// the loss's gradient as the factor. The target (indices) has none.
std::vector<std::optional<DTensor>> indices_backward(const BackwardCall& c) {
  const OpSchema& f = c.forward;
  std::vector<std::optional<DTensor>> grads(2);
  if (c.needs_input_grad[1]) throw NotSupported(kForward, "target: class indices have no gradient");
  if (!c.needs_input_grad[0]) return grads;
  const double factor = scalar_of(autograd::detail::grad_of_output(c), kForward);
  const DTensor& input = f.dtensor(0);
  grads[0] = detail::placed_like_input(
      dispatch(kBackward, {input, f.dtensor(1), f.text(2), f.int_value(3), f.scalar(4), factor})
          .at(0),
      input);
  return grads;
}

struct Registrar {
  Registrar() {
    for (const bool backward : {false, true}) {
      const char* op = backward ? kBackward : kForward;
      OpDef d;
      d.name = op;
      d.validate = check_indices;
      d.output_meta = indices_meta;
      d.signatures = indices_signatures;
      d.accepts_integer_arguments = true;
      if (!backward) d.backward = indices_backward;
      register_op(d);
      // Local counts and sums first: the agreement is confirmed by the first
      // collective (or the inputs' redistribution).
      register_op_handler(op, indices_handler, false, {.defers_agreement = true});
    }
  }
};
const Registrar registrar;

std::vector<OpArg> index_args(const DTensor& input, const DTensor& target,
                              const CrossEntropyOptions& o) {
  return {input, target, std::string(loss_reduction_name(o.reduction)), o.ignore_index,
          o.label_smoothing};
}

// Probability targets: PyTorch refuses a non-negative ignore_index for them
// ("ignore_index is not supported for floating point target"), and the
// smoothing bounds are the same as for indices. Checked before dispatch,
// so refused on every rank together (agreed_front_end); then the target is
// smoothed, (1 - s) * target + s / C.
DTensor smoothed_probabilities(const DTensor& input, const DTensor& target,
                               const CrossEntropyOptions& o) {
  detail::agreed_front_end(input.mesh(), "cross_entropy", [&] {
    check_arg(o.ignore_index < 0, "cross_entropy",
              "ignore_index: {} is not supported for class-probability targets (only for "
              "class-index targets; leave it negative)",
              o.ignore_index);
    check_arg(o.label_smoothing >= 0.0 && o.label_smoothing <= 1.0, "cross_entropy",
              "label_smoothing: must be between 0.0 and 1.0, got {}", o.label_smoothing);
    check_arg(input.ndim() >= 2, "cross_entropy",
              "input: expected [N, C, d1, ...] (class dim 1), got shape {}",
              shape_str(input.shape()));
  });
  if (o.label_smoothing == 0.0) return target;
  const double classes = static_cast<double>(input.shape()[1]);
  return scale(target, 1.0 - o.label_smoothing) + o.label_smoothing / classes;
}

}  // namespace

DTensor cross_entropy(const DTensor& input, const DTensor& target,
                      const CrossEntropyOptions& options) {
  if (target.dtype() != DType::I64)
    return cross_entropy(input, smoothed_probabilities(input, target, options), options.reduction);
  return dispatch(kForward, index_args(input, target, options)).at(0);
}

DTensor cross_entropy_backward(const DTensor& input, const DTensor& target,
                               const CrossEntropyOptions& options, double grad) {
  if (target.dtype() != DType::I64)
    return cross_entropy_backward(input, smoothed_probabilities(input, target, options),
                                  options.reduction, grad);
  std::vector<OpArg> args = index_args(input, target, options);
  args.emplace_back(grad);
  return detail::placed_like_input(dispatch(kBackward, std::move(args)).at(0), input);
}

DTensor cross_entropy_backward(const DTensor& grad_output, const DTensor& input,
                               const DTensor& target, const CrossEntropyOptions& options) {
  return cross_entropy_backward(input, target, options,
                                scalar_of(grad_output, "cross_entropy_backward"));
}

}  // namespace dtensor
