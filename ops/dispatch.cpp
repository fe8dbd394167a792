#include "dtensor/ops/dispatch.h"

#include <atomic>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "dtensor/core/comm_scope.h"
#include "dtensor/core/config.h"
#include "dtensor/core/errors.h"
#include "dtensor/core/fault.h"
#include "dtensor/core/logging.h"
#include "dtensor/core/profile.h"
#include "dtensor/ops/autocast.h"
#include "dtensor/ops/autograd.h"
#include "dtensor/placement/redistribute.h"
#include "ops/autograd/recorded_nodes.h"
#include "ops/call_scoped_group.h"
#include "ops/deferred_agreement.h"
#include "ops/detail/combinations.h"
#include "ops/detail/plugin_fingerprint.h"

namespace dtensor {
namespace {

struct Stats {
  std::atomic<std::uint64_t> calls{0}, hits{0}, misses{0}, redistributed{0}, handler_calls{0};
};
Stats& stats() {
  static Stats s;
  return s;
}

struct PropagationCache {
  std::mutex mutex;
  // Node-based: references to values stay valid while other keys are added.
  std::unordered_map<OpSchemaKey, OutputSharding, OpSchemaKeyHash> map;
};
PropagationCache& cache() {
  static PropagationCache c;
  return c;
}

bool agreement_checks_enabled() {
  return config().check_agreement;
}

// A call's identity across ranks: what it was asked, and its number on the
// mesh's group (so calls out of step between ranks are caught as well).
struct CallIdentity {
  std::size_t fingerprint;
  std::string description;
};
// `describe` gives what was asked in words. Only the debug form of the check
// compares descriptions (DTENSOR_DEBUG); otherwise it is not built at all, as
// formatting a call's arguments on every dispatch costs more than the check.
template <typename Describe>
CallIdentity number_call(ProcessGroup& group, std::size_t what_hash, Describe&& describe) {
  const std::uint64_t n = group.next_call_number();
  return {what_hash ^ (std::hash<std::uint64_t>()(n) + 0x9e3779b97f4a7c15ull + (what_hash << 6) +
                       (what_hash >> 2)),
          config().debug ? fmt::format("{} (call {} on this mesh)", describe(), n) : std::string()};
}

PendingAgreement post_agreement(const DeviceMesh& mesh, const CallIdentity& id,
                                const std::string& op) {
  if (!agreement_checks_enabled()) return {};
  return PendingAgreement(mesh.get_mesh_group(), id.fingerprint, op, id.description);
}

// Every combination of per-mesh-dim signatures, mesh dim 0 varying slowest,
// so the enumeration order (and so the tie-break) is the same on every rank.
std::vector<ShardingStrategy> expand_signatures(const std::vector<ShardingSignature>& sigs,
                                                std::int64_t mesh_ndim, std::size_t n_in,
                                                std::size_t n_out) {
  std::vector<ShardingStrategy> out;
  detail::for_each_combination(mesh_ndim, sigs.size(), [&](const std::vector<std::size_t>& idx) {
    ShardingStrategy s;
    s.inputs.assign(n_in, Placements{});
    s.outputs.assign(n_out, Placements{});
    for (std::int64_t m = 0; m < mesh_ndim; ++m) {
      const auto& sig = sigs[idx[m]];
      for (std::size_t i = 0; i < n_in; ++i)
        s.inputs[i].push_back(sig.inputs.at(i));
      for (std::size_t o = 0; o < n_out; ++o)
        s.outputs[o].push_back(sig.outputs.at(o));
    }
    out.push_back(std::move(s));
  });
  return out;
}

OutputSharding compute_sharding(const OpSchema& schema, const OpDef& def) {
  const DeviceMesh& mesh = schema.mesh();
  const auto specs = schema.input_specs();
  check_arg(static_cast<bool>(def.output_meta), "dispatch",
            "{}: the operator has no output_meta, so the default path cannot run it", def.name);
  const auto metas = def.output_meta(schema);
  std::vector<ShardingStrategy> candidates;
  if (def.strategies) candidates = def.strategies(schema);
  if (def.signatures) {
    auto more = expand_signatures(def.signatures(schema), mesh.ndim(), specs.size(), metas.size());
    candidates.insert(candidates.end(), more.begin(), more.end());
  }
  check_arg(!candidates.empty(), "dispatch", "{}: the operator lists no sharding strategy",
            def.name);
  OutputSharding best;
  best.cost_bytes = std::numeric_limits<double>::infinity();
  bool found = false;
  for (auto& cand : candidates) {
    if (cand.inputs.size() != specs.size() || cand.outputs.size() != metas.size()) continue;
    double cost = 0;
    std::vector<DTensorSpec> in_specs, out_specs;
    try {
      for (std::size_t i = 0; i < specs.size() && std::isfinite(cost); ++i) {
        cost += redistribute_cost_bytes(specs[i], cand.inputs[i]);
        in_specs.emplace_back(mesh, cand.inputs[i], specs[i].shape(), specs[i].dtype());
      }
      for (std::size_t o = 0; o < metas.size(); ++o)
        out_specs.emplace_back(mesh, cand.outputs[o], metas[o].shape, metas[o].dtype);
    } catch (const InvalidArgument&) {
      continue;  // a placement that does not fit these tensors (e.g. a dim out of range)
    }
    if (!std::isfinite(cost) || (found && cost >= best.cost_bytes)) continue;
    found = true;
    best.strategy = cand;
    best.cost_bytes = cost;
    best.input_specs = std::move(in_specs);
    best.output_specs = std::move(out_specs);
  }
  std::string have;
  for (auto& s : specs)
    have += (have.empty() ? "" : ", ") + placements_str(s.placements());
  check_arg(found, "dispatch", "{}: no sharding strategy accepts inputs placed as [{}]", def.name,
            have);
  for (std::size_t i = 0; i < specs.size(); ++i)
    best.needs_redistribute = best.needs_redistribute || !(best.input_specs[i] == specs[i]);
  log::debug("propagate {}: {} (cost {} bytes)", schema.str(), best.strategy.str(),
             best.cost_bytes);
  return best;
}

}  // namespace

const OutputSharding& propagate(const OpSchema& schema) {
  auto& c = cache();
  {
    std::lock_guard lock(c.mutex);
    auto it = c.map.find(schema.key());
    if (it != c.map.end()) {
      ++stats().hits;
      return it->second;
    }
  }
  ++stats().misses;
  const OpDef& def = op_def(schema.op());
  OutputSharding s = compute_sharding(schema, def);
  std::lock_guard lock(c.mutex);
  return c.map.emplace(schema.key(), std::move(s)).first->second;
}

OpCall::OpCall(OpSchema schema, PendingAgreement agreement, int message_tag)
    : schema_(std::move(schema)), agreement_(std::move(agreement)), message_tag_(message_tag) {}

OpCall::~OpCall() = default;

ProcessGroup& OpCall::group(std::int64_t mesh_dim) {
  const DeviceMesh& mesh = schema_.mesh();
  DTENSOR_CHECK_ARG(mesh_dim >= 0 && mesh_dim < mesh.ndim(), "dispatch",
                    "group: mesh_dim {} is outside the call's {}-dim mesh", mesh_dim, mesh.ndim());
  if (groups_.empty()) groups_.resize(static_cast<std::size_t>(mesh.ndim()));
  auto& g = groups_[static_cast<std::size_t>(mesh_dim)];
  if (!g) g = std::make_unique<CallScopedGroup>(mesh.get_group(mesh_dim), agreement_, message_tag_);
  return *g;
}

ProcessGroup& OpCall::group(const std::vector<std::int64_t>& mesh_dims) {
  if (mesh_dims.size() == 1) return group(mesh_dims[0]);
  const DeviceMesh& mesh = schema_.mesh();
  unsigned set = 0;
  for (std::int64_t d : mesh_dims)
    if (d >= 0 && d < mesh.ndim()) set |= 1u << d;  // get_group checks the list below
  for (auto& [key, g] : block_groups_)
    if (key == set) return *g;
  // Making a block's group is collective: every rank must be in this call.
  confirm_agreement();
  auto inner = mesh.get_group(mesh_dims);
  block_groups_.emplace_back(
      set, std::make_unique<CallScopedGroup>(std::move(inner), agreement_, message_tag_));
  return *block_groups_.back().second;
}

int OpCall::message_tag(int stream) const {
  check_arg(stream >= 0 && stream < 8, "dispatch", "message_tag: stream={} is outside 0..7",
            stream);
  return message_tag_ + stream;
}

void agree_before_failing(const DeviceMesh& mesh, std::size_t fingerprint, const std::string& op,
                          const std::string& description) {
  if (!mesh.contains_this_rank()) return;
  post_agreement(mesh,
                 number_call(*mesh.get_mesh_group(), fingerprint, [&] { return description; }), op)
      .confirm();
}

bool OpCall::has_strategies() const {
  const OpDef* d = find_op_def(schema_.op());
  return d && (d->signatures || d->strategies);
}

const OutputSharding& OpCall::sharding() {
  if (!sharding_) sharding_ = &propagate(schema_);
  return *sharding_;
}

std::vector<DTensor> OpCall::redistributed_inputs() {
  const auto& s = sharding();
  if (s.needs_redistribute) confirm_agreement();  // redistributing communicates
  std::vector<DTensor> out;
  const auto& pos = schema_.dtensor_positions();
  for (std::size_t i = 0; i < pos.size(); ++i) {
    const DTensor& x = schema_.dtensor(pos[i]);
    if (x.spec() == s.input_specs[i]) {
      out.push_back(x);
    } else {
      ++stats().redistributed;
      out.push_back(x.redistribute(x.mesh(), s.input_specs[i].placements()));
    }
  }
  return out;
}

void OpCall::finish_agreement() {
  if (agreement_.settled() || !detail::agreements_deferred()) return confirm_agreement();
  detail::defer_agreement(std::exchange(agreement_, PendingAgreement()));
}

std::vector<DTensor> OpCall::run_default() {
  return run_kernel(redistributed_inputs());
}

std::vector<DTensor> OpCall::run_kernel(const std::vector<DTensor>& inputs) {
  // A local kernel does not communicate, so the agreement is confirmed after
  // it: the peers' checks arrive while it computes, and a rank waits only
  // for a peer that has not yet started this call, instead of every rank
  // stopping at every operator for the slowest one's message.
  const auto& s = sharding();
  const auto& pos = schema_.dtensor_positions();
  DTENSOR_CHECK_ARG(inputs.size() == pos.size(), "dispatch", "{}: {} inputs given, {} expected",
                    schema_.op(), inputs.size(), pos.size());
  KernelCall call{schema_, schema_.args(), {}, s.output_specs};
  for (std::size_t i = 0; i < pos.size(); ++i) {
    call.local_args[pos[i]] = inputs[i].to_local();
    call.input_specs.push_back(inputs[i].spec());
  }
  const DTensor& first = inputs.at(0);
  const DeviceType device = first.to_local().device().type;
  const LocalKernel& kernel = op_kernel(schema_.op(), device, first.dtype());
  std::vector<Tensor> locals;
  {
    const detail::KernelTimer timed(schema_.op().c_str(), device, first.dtype());
    locals = kernel(call);
  }
  DTENSOR_CHECK_ARG(locals.size() == s.output_specs.size(), "dispatch",
                    "{}: the kernel returned {} outputs, {} expected", schema_.op(), locals.size(),
                    s.output_specs.size());
  // Inside backward() the check stays with the call: dispatch queues it when
  // the call returns, unless a handler's later messages confirm it first.
  if (!detail::agreements_deferred()) confirm_agreement();
  std::vector<DTensor> outs;
  for (std::size_t o = 0; o < locals.size(); ++o)
    outs.emplace_back(locals[o], s.output_specs[o]);
  return outs;
}

namespace {
// What every rank knows alike (the specs' dtypes): all refuse together.
void refuse_integer_arguments(const OpSchema& s) {
  for (std::size_t pos : s.dtensor_positions())
    DTENSOR_CHECK_ARG(
        is_floating(s.dtensor(pos).dtype()), s.op(),
        "argument {}: an {} DTensor (integers, e.g. class indices) has no arithmetic; "
        "'{}' needs f32, f64, bf16 or f16",
        pos, dtype_name(s.dtensor(pos).dtype()), s.op());
}

std::vector<DTensor> dispatch_untracked(const std::string& op, std::vector<OpArg> args) {
  OpSchema schema(op, std::move(args));
  const DeviceMesh& mesh = schema.mesh();
  // All ranks must be making the same call. The check is posted first and
  // confirmed before anything that communicates (or by a handler that asks
  // to, behind its own first messages); any error below waits for it, so a
  // rank asked something else makes every rank throw the disagreement, and
  // ranks that agree throw the same validation errors.
  // The loaded plugins count too: one loaded on some ranks only makes every
  // rank's call disagree instead of one rank running another handler.
  const std::size_t plugins = detail::loaded_plugins_fingerprint();
  const CallIdentity id = number_call(
      *mesh.get_mesh_group(), OpSchemaKeyHash()(schema.key()) ^ plugins,
      [&] { return plugins ? schema.str() + detail::loaded_plugins_description() : schema.str(); });
  const int tag = static_cast<int>((id.fingerprint % (std::size_t{1} << 27)) << 3);
  OpCall call(std::move(schema), post_agreement(mesh, id, op), tag);
  try {
    HandlerOptions options;
    const OpHandler* handler = find_handler(op, options);
    const OpDef* def = find_op_def(op);
    check_arg(handler != nullptr || def != nullptr, "dispatch",
              "unknown operator '{}': nothing is registered under that name", op);
    if (!def || !def->accepts_integer_arguments) refuse_integer_arguments(call.schema());
    if (def && def->validate) def->validate(call.schema());
    if (!handler) {
      auto outs = call.run_default();
      call.finish_agreement();
      return outs;
    }
    ++stats().handler_calls;
    if (!options.defers_agreement) call.confirm_agreement();
    auto outs = (*handler)(call);
    call.finish_agreement();  // a handler that never waited still hears a disagreement
    return outs;
  } catch (const std::exception& e) {
    // A disagreement (an earlier call's left for later first) is the error
    // every rank raises alike.
    detail::confirm_deferred_agreements();
    if (!call.agreement_settled()) call.confirm_agreement();
    detail::report_failure(e);  // a handler's own failure: the other ranks must hear of it
    throw;
  }
}
}  // namespace

std::vector<DTensor> dispatch(const std::string& op, std::vector<OpArg> args) {
  // Autocast's casts are calls of their own, recorded before this one, so
  // that the call below sees (and autograd saves) the cast arguments.
  if (autocast_enabled()) args = detail::autocast_arguments(op, std::move(args));
  const detail::AutocastSuspended not_inside_an_operator;
  detail::CommScope scope(op);  // the call the desync check names
  ++stats().calls;
  if (!autograd::detail::should_record(op, args)) {
    // What a handler calls is part of its operator, never recorded on its own.
    NoGradGuard inside_the_operator;
    return dispatch_untracked(op, std::move(args));
  }
  std::vector<OpArg> saved = args;  // DTensors share their data: no copy
  std::vector<DTensor> outs;
  {
    NoGradGuard inside_the_operator;
    outs = dispatch_untracked(op, std::move(args));
  }
  return autograd::detail::record_dispatch(op, std::move(saved), std::move(outs));
}

DispatchStats dispatch_stats() {
  auto& s = stats();
  return {s.calls.load(), s.hits.load(), s.misses.load(), s.redistributed.load(),
          s.handler_calls.load()};
}

void reset_dispatch_stats() {
  auto& s = stats();
  s.calls = s.hits = s.misses = s.redistributed = s.handler_calls = 0;
}

void clear_propagation_cache() {
  std::lock_guard lock(cache().mutex);
  cache().map.clear();
}

}  // namespace dtensor
