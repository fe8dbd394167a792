// The shape operators' rows: reshape, permute, transpose, flatten, narrow.
// They take any input of 1 to 5 dims, their backward runs through autograd,
// and they move values: output and grad_input must equal the oracle's bit
// for bit (each grad_input element is one grad_output element or zero).
#include <numeric>

#include "dtensor/ops/views.h"
#include "tools/dtensor-op/entries/entry_helpers.h"
#include "tools/reference/reference_view_ops.h"

namespace dtensor::op_cli::entries {
namespace {

// The dims of the input in the order permute / transpose put them.
std::vector<Int> permutation(const Options& o) {
  if (o.op == OpKind::Permute) return o.order;
  std::vector<Int> order(o.input.size());
  std::iota(order.begin(), order.end(), Int{0});
  std::swap(order[static_cast<std::size_t>(o.dim0)], order[static_cast<std::size_t>(o.dim1)]);
  return order;
}

Shape permuted_shape(const Options& o) {
  Shape out;
  for (Int d : permutation(o))
    out.push_back(o.input[static_cast<std::size_t>(d)]);
  return out;
}

void reshape_reference(const Options& o, const GlobalTensors& g, int ranks,
                       std::vector<TensorCheck>& out) {
  using namespace dtensor::reference;
  out.push_back(
      compare("output", g.output, ref_reshape(g.input, o.output_shape()), 1, o.dtype, ranks, true));
  if (o.backward)
    out.push_back(compare("grad_input", g.grad_input, ref_reshape(g.grad_output, g.input.shape()),
                          1, o.dtype, ranks, true));
}

void permute_reference(const Options& o, const GlobalTensors& g, int ranks,
                       std::vector<TensorCheck>& out) {
  using namespace dtensor::reference;
  const std::vector<Int> order = permutation(o);
  out.push_back(compare("output", g.output, ref_permute(g.input, order), 1, o.dtype, ranks, true));
  if (o.backward)
    out.push_back(compare("grad_input", g.grad_input, ref_permute_grad_input(g.grad_output, order),
                          1, o.dtype, ranks, true));
}

OpEntry view_entry(OpKind kind, std::string_view name,
                   Forward (*forward)(const Options&, const Operands&)) {
  OpEntry e{kind, name, Family::View};
  e.forward = forward;
  e.backward = autograd_backward;
  return e;
}

OpEntry reshape_entry() {
  OpEntry e = view_entry(OpKind::Reshape, "reshape", [](const Options& o, const Operands& ops) {
    return Forward(reshape(ops.input, o.shape));
  });
  e.options = {"--shape"};
  e.output_shape = [](const Options& o) { return o.shape; };
  e.params_line = [](const Options& o) { return fmt::format("shape={}", list(o.shape)); };
  e.meta = [](json& meta, const Options& o) { meta["shape"] = o.shape; };
  e.reference = reshape_reference;
  return e;
}

OpEntry permute_entry() {
  OpEntry e = view_entry(OpKind::Permute, "permute", [](const Options& o, const Operands& ops) {
    return Forward(permute(ops.input, o.order));
  });
  e.options = {"--order"};
  e.output_shape = permuted_shape;
  e.params_line = [](const Options& o) { return fmt::format("order={}", list(o.order)); };
  e.meta = [](json& meta, const Options& o) { meta["order"] = o.order; };
  e.reference = permute_reference;
  return e;
}

OpEntry transpose_entry() {
  OpEntry e = view_entry(OpKind::Transpose, "transpose", [](const Options& o, const Operands& ops) {
    return Forward(transpose(ops.input, o.dim0, o.dim1));
  });
  e.options = {"--dim0", "--dim1"};
  e.output_shape = permuted_shape;
  e.params_line = [](const Options& o) { return fmt::format("dim0={} dim1={}", o.dim0, o.dim1); };
  e.meta = [](json& meta, const Options& o) {
    meta["dim0"] = o.dim0;
    meta["dim1"] = o.dim1;
  };
  e.reference = permute_reference;
  return e;
}

OpEntry flatten_entry() {
  OpEntry e = view_entry(OpKind::Flatten, "flatten", [](const Options& o, const Operands& ops) {
    return Forward(flatten(ops.input, o.start_dim, o.end_dim));
  });
  e.options = {"--start-dim", "--end-dim"};
  e.output_shape = [](const Options& o) {
    Shape out;
    Int merged = 1;
    for (Int d = 0; d < static_cast<Int>(o.input.size()); ++d) {
      const Int n = o.input[static_cast<std::size_t>(d)];
      if (d < o.start_dim || d > o.end_dim) {
        if (d == o.end_dim + 1) out.push_back(merged);
        out.push_back(n);
      } else {
        merged *= n;
      }
    }
    if (o.end_dim + 1 == static_cast<Int>(o.input.size())) out.push_back(merged);
    return out;
  };
  e.params_line = [](const Options& o) {
    return fmt::format("start_dim={} end_dim={}", o.start_dim, o.end_dim);
  };
  e.meta = [](json& meta, const Options& o) {
    meta["start_dim"] = o.start_dim;
    meta["end_dim"] = o.end_dim;
  };
  e.reference = reshape_reference;
  return e;
}

OpEntry narrow_entry() {
  OpEntry e = view_entry(OpKind::Narrow, "narrow", [](const Options& o, const Operands& ops) {
    return Forward(narrow(ops.input, o.dim, o.start, o.length));
  });
  e.options = {"--dim", "--start", "--length"};
  e.output_shape = [](const Options& o) {
    Shape out = o.input;
    out[static_cast<std::size_t>(o.dim)] = o.length;
    return out;
  };
  e.params_line = [](const Options& o) {
    return fmt::format("dim={} start={} length={}", o.dim, o.start, o.length);
  };
  e.meta = [](json& meta, const Options& o) {
    meta["dim"] = o.dim;
    meta["start"] = o.start;
    meta["length"] = o.length;
  };
  e.reference = [](const Options& o, const GlobalTensors& g, int ranks,
                   std::vector<TensorCheck>& out) {
    using namespace dtensor::reference;
    out.push_back(compare("output", g.output, ref_narrow(g.input, o.dim, o.start, o.length), 1,
                          o.dtype, ranks, true));
    if (o.backward)
      out.push_back(compare("grad_input", g.grad_input,
                            ref_narrow_grad_input(g.grad_output, g.input.shape(), o.dim, o.start),
                            1, o.dtype, ranks, true));
  };
  return e;
}

}  // namespace
}  // namespace dtensor::op_cli::entries

namespace dtensor::op_cli {

std::vector<OpEntry> view_entries() {
  using namespace entries;
  return {reshape_entry(), permute_entry(), transpose_entry(), flatten_entry(), narrow_entry()};
}

}  // namespace dtensor::op_cli
