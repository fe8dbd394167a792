// dropout and its backward (dtensor/ops/dropout.h).
//
// Argument layout (docs/operators.md):
//   dropout: input, p (double), seed (int, the uint64 bits), stream (int)
// The backward is the same operator on the gradient (the same mask, the same
// scale), so it needs no operator of its own.
//
// Strategies (per mesh dim): Shard(d) -> Shard(d), Replicate -> Replicate,
// Partial -> Partial: the mask is a function of the global index, so every
// rank masks its part of the whole tensor exactly as one rank would, and a
// pending sum masked term by term is the masked sum. The handler tells the
// kernel where this rank's part sits (DTensorSpec::global_offset).
#include <bit>
#include <cmath>

#include "dtensor/core/errors.h"
#include "dtensor/ops/dispatch.h"
#include "dtensor/ops/dropout.h"
#include "dtensor/ops/kernels/dropout.h"
#include "ops/autograd/backward_helpers.h"

namespace dtensor {
namespace {

constexpr const char* kOp = "dropout";

// The generator of this thread: manual_seed() sets it, each training-mode
// dropout() takes a stream.
thread_local DropoutGeneratorState generator{};

std::uint64_t as_bits(std::int64_t v) {
  return std::bit_cast<std::uint64_t>(v);
}
std::int64_t as_int(std::uint64_t v) {
  return std::bit_cast<std::int64_t>(v);
}

void check_p(double p, const char* op) {
  check_arg(p >= 0.0 && p <= 1.0, op,
            "p: dropout probability has to be between 0 and 1, but got {}", p);
}

void check_dropout(const OpSchema& s) {
  DTENSOR_CHECK_ARG(s.size() == 4, s.op(),
                    "{} arguments given, 4 expected (input, p, seed, stream)", s.size());
  s.dtensor(0);
  check_p(s.scalar(1), kOp);
  s.int_value(2);
  s.int_value(3);
}

std::vector<TensorMeta> same_as_input(const OpSchema& s) {
  return {{s.dtensor(0).shape(), s.dtensor(0).dtype()}};
}

std::vector<ShardingSignature> dropout_signatures(const OpSchema& s) {
  std::vector<ShardingSignature> sigs;
  for (std::int64_t d = 0; d < s.dtensor(0).ndim(); ++d)
    sigs.push_back({{Shard(d)}, {Shard(d)}});
  sigs.push_back({{Replicate()}, {Replicate()}});
  sigs.push_back({{Partial()}, {Partial()}});
  return sigs;
}

std::vector<DTensor> dropout_handler(OpCall& call) {
  const OpSchema& s = call.schema();
  const DTensor x = call.redistributed_inputs().at(0);
  const DTensorSpec& spec = call.sharding().output_specs[0];
  const Tensor local = x.to_local().contiguous();
  Tensor out = Tensor::empty(local.shape(), local.dtype(), local.device());
  const std::uint64_t key = kernels::dropout_key(as_bits(s.int_value(2)), as_bits(s.int_value(3)));
  run_kernel(kernels::kDropout, local.device().type, local.dtype(),
             {local, spec.shape(), spec.global_offset(), key, s.scalar(1), out});
  return {DTensor(out, spec)};
}

// The gradient: the same mask on the gradient, placed like the input.
std::vector<std::optional<DTensor>> dropout_backward_fn(const BackwardCall& c) {
  std::vector<std::optional<DTensor>> grads(1);
  if (!c.needs_input_grad[0]) return grads;
  const OpSchema& f = c.forward;
  const DTensor& g = autograd::detail::grad_of_output(c);
  grads[0] = dispatch(kOp, {g, f.scalar(1), f.int_value(2), f.int_value(3)}).at(0);
  return grads;
}

struct Registrar {
  Registrar() {
    OpDef d;
    d.name = kOp;
    d.validate = check_dropout;
    d.output_meta = same_as_input;
    d.signatures = dropout_signatures;
    d.backward = dropout_backward_fn;
    register_op(d);
    // Local: it communicates only when the input is redistributed.
    register_op_handler(kOp, dropout_handler, false, {.defers_agreement = true});
  }
};
const Registrar registrar;

}  // namespace

void manual_seed(std::uint64_t seed) {
  generator = {seed, 0};
}

DropoutGeneratorState dropout_generator_state() {
  return generator;
}

void set_dropout_generator_state(const DropoutGeneratorState& state) {
  generator = state;
}

DTensor dropout(const DTensor& input, double p, bool training) {
  check_p(p, kOp);
  if (!training) return input;
  const DropoutGeneratorState at = generator;
  DTensor out = dropout(input, p, at.seed, at.stream);
  generator.stream = at.stream + 1;  // only once the call went through
  return out;
}

DTensor dropout(const DTensor& input, double p, std::uint64_t seed, std::uint64_t stream) {
  return dispatch(kOp, {input, p, as_int(seed), as_int(stream)}).at(0);
}

DTensor dropout_backward(const DTensor& grad_output, double p, std::uint64_t seed,
                         std::uint64_t stream) {
  return dispatch(kOp, {grad_output, p, as_int(seed), as_int(stream)}).at(0);
}

}  // namespace dtensor
