// backward(): walks the graph from the output in reverse creation order.
//
// Every rank must run the same nodes in the same order (their backwards
// communicate), so the order is a pure function of the graph: the ready node
// with the highest sequence number first (the forward's order reversed), as
// PyTorch's engine does on one thread.
#include <map>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "dtensor/core/errors.h"
#include "dtensor/ops/autocast.h"
#include "dtensor/ops/autograd.h"
#include "dtensor/ops/pointwise.h"
#include "dtensor/placement/bucketed_reduce.h"
#include "ops/autograd/backward_helpers.h"
#include "ops/deferred_agreement.h"

namespace dtensor {
namespace {

using autograd::Node;

using autograd::detail::gradient_placements;

bool has_partial(const DTensor& g) {
  for (const auto& p : g.placements())
    if (p.is_partial()) return true;
  return false;
}

// A leaf's gradient keeps its Partial mesh dims (reduced once, at the end);
// elsewhere it is placed like the leaf.
Placements leaf_pending_placements(const DTensor& g, const DTensorSpec& of) {
  Placements p = gradient_placements(of);
  for (std::size_t m = 0; m < p.size(); ++m)
    if (g.placements()[m].is_partial()) p[m] = g.placements()[m];
  return p;
}

DTensor place(const DTensor& g, const Placements& p) {
  return g.placements() == p ? g : g.redistribute(g.mesh(), p);
}

DTensor accumulate(const std::optional<DTensor>& have, const DTensor& g) {
  if (!have) return g;
  return add(*have, place(g, have->placements()));
}

void check_gradient_fits(const DTensor& g, const DTensorSpec& of, const std::string& where) {
  DTENSOR_CHECK_ARG(g.shape() == of.shape() && g.dtype() == of.dtype() && g.mesh() == of.mesh(),
                    "autograd", "{}: a gradient of shape {} ({}) for a tensor {} ", where,
                    shape_str(g.shape()), dtype_name(g.dtype()), of.str());
}

struct ByNewestFirst {
  bool operator()(const Node* a, const Node* b) const {
    return a->sequence_nr() < b->sequence_nr();
  }
};

// Gradients pending for the leaves, in the order they were first reached
// (the same on every rank), with the specs they are to end up in.
struct LeafGradients {
  std::vector<std::shared_ptr<AutogradMeta>> order;
  std::unordered_map<AutogradMeta*, std::pair<DTensor, DTensorSpec>> pending;

  void push(const std::shared_ptr<AutogradMeta>& leaf, const DTensor& g, const DTensorSpec& of) {
    DTensor placed = place(g, leaf_pending_placements(g, of));
    auto it = pending.find(leaf.get());
    if (it == pending.end()) {
      order.push_back(leaf);
      pending.emplace(leaf.get(), std::make_pair(placed, of));
    } else {
      it->second.first = accumulate(it->second.first, placed);
    }
  }

  // One bucketed reduction for every Partial gradient, then into grad().
  void flush() {
    std::vector<DTensor> partial;
    for (const auto& leaf : order) {
      const DTensor& g = pending.at(leaf.get()).first;
      if (has_partial(g)) partial.push_back(g);
    }
    std::vector<DTensor> reduced = partial.empty() ? partial : reduce_partials(partial);
    std::size_t next = 0;
    for (const auto& leaf : order) {
      auto& [g, of] = pending.at(leaf.get());
      DTensor done = place(has_partial(g) ? reduced.at(next++) : g, gradient_placements(of));
      DTensor total = leaf->grad ? add(*leaf->grad, done) : done;
      leaf->grad = std::make_shared<DTensor>(total.detach());
    }
  }
};

}  // namespace

void backward(const DTensor& output, const std::optional<DTensor>& grad, bool retain_graph) {
  check_arg(output.requires_grad(), "backward",
            "output: it does not require grad (no input of the operators that computed it "
            "requires grad, or it was computed with grad mode off)");
  NoGradGuard no_grad;
  // The gradients run in the dtypes the forward chose, as torch's backward
  // outside autocast: nothing in backward is cast again.
  const detail::AutocastSuspended no_autocast;
  // The forward's calls replayed: the checks of those that have not
  // communicated when they return are queued, and confirmed before any
  // gradient is written (ops/deferred_agreement.h).
  DeferredAgreementScope deferred_checks;
  DTensor seed = [&] {
    if (grad) {
      check_gradient_fits(*grad, output.spec(), "backward: grad");
      return *grad;
    }
    DTENSOR_CHECK_ARG(
        shape_numel(output.shape()) == 1, "backward",
        "grad: needed for an output of shape {} (only a one-element output, such as a "
        "loss, has the implicit gradient 1)",
        shape_str(output.shape()));
    const DTensorSpec spec(output.mesh(), gradient_placements(output.spec()), output.shape(),
                           output.dtype());
    return DTensor(
        Tensor::full(spec.local_shape(), 1.0, output.dtype(), output.to_local().device()), spec);
  }();

  LeafGradients leaves;
  const auto& meta = output.autograd_meta();
  if (!meta->grad_fn) {
    leaves.push(meta, seed, output.spec());
    leaves.flush();
    deferred_checks.confirm();
    return;
  }

  // How many gradients each reachable node waits for.
  std::unordered_map<Node*, std::size_t> waiting;
  std::unordered_map<Node*, std::shared_ptr<Node>> keep;
  {
    std::vector<Node*> stack{meta->grad_fn.get()};
    keep[meta->grad_fn.get()] = meta->grad_fn;
    waiting[meta->grad_fn.get()] = 0;
    while (!stack.empty()) {
      Node* n = stack.back();
      stack.pop_back();
      for (const auto& e : n->next_edges()) {
        if (!e.node) continue;
        auto [it, fresh] = waiting.try_emplace(e.node.get(), 0);
        ++it->second;
        if (fresh) {
          keep[e.node.get()] = e.node;
          stack.push_back(e.node.get());
        }
      }
    }
  }

  std::unordered_map<Node*, std::vector<std::optional<DTensor>>> inbox;
  auto deliver = [&](Node* n, std::uint32_t output_nr, const DTensor& g) {
    auto& slots = inbox[n];
    if (slots.empty()) slots.resize(n->num_outputs());
    slots.at(output_nr) = accumulate(slots[output_nr], g);
  };
  deliver(meta->grad_fn.get(), meta->output_nr, seed);

  std::priority_queue<Node*, std::vector<Node*>, ByNewestFirst> ready;
  ready.push(meta->grad_fn.get());
  while (!ready.empty()) {
    Node* n = ready.top();
    ready.pop();
    auto grads_in = std::move(inbox[n]);
    inbox.erase(n);
    grads_in.resize(n->num_outputs());
    bool any_in = false;
    for (const auto& g : grads_in)
      any_in = any_in || g.has_value();
    // No gradient reached it (only through outputs nobody used): nothing flows on.
    auto grads = any_in ? n->apply(grads_in) : std::vector<std::optional<DTensor>>{};
    if (!retain_graph) n->release_saved();
    for (std::size_t i = 0; i < n->next_edges().size(); ++i) {
      const auto& e = n->next_edges()[i];
      if (e.empty()) continue;
      const DTensorSpec& of = n->input_specs()[i];
      const std::optional<DTensor>& g = i < grads.size() ? grads[i] : std::nullopt;
      if (g) check_gradient_fits(*g, of, n->name() + "'s backward");
      if (e.leaf) {
        if (g) leaves.push(e.leaf, *g, of);
        continue;
      }
      if (g) deliver(e.node.get(), e.output_nr, place(*g, gradient_placements(of)));
      if (--waiting.at(e.node.get()) == 0) ready.push(e.node.get());
    }
  }
  deferred_checks.confirm();  // before any grad() is written
  leaves.flush();
  deferred_checks.confirm();  // the flush's own local calls
}

}  // namespace dtensor
