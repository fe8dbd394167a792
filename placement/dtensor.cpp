#include "dtensor/placement/dtensor.h"

#include <functional>
#include <optional>
#include <string>

#include "dtensor/core/comm_scope.h"
#include "dtensor/core/errors.h"
#include "dtensor/core/logging.h"
#include "dtensor/placement/redistribute.h"

namespace dtensor {
namespace {

int mesh_group_rank_of(const DeviceMesh& mesh, int world_rank) {
  // The mesh group orders its members by world rank.
  int idx = 0;
  for (int r : mesh.ranks())
    idx += r < world_rank;
  return idx;
}

// The local tensor of `spec` at a coordinate, cut from the global tensor.
Tensor local_part(const Tensor& global, const DTensorSpec& spec,
                  const std::vector<std::int64_t>& coord) {
  const Shape shape = spec.local_shape_at(coord);
  const Shape off = spec.global_offset_at(coord);
  for (std::size_t i = 0; i < spec.placements().size(); ++i) {
    const auto& p = spec.placements()[i];
    if (p.is_partial() && p.reduce_op() == ReduceOp::Sum && coord[i] != 0)
      return Tensor::zeros(shape, global.dtype());
  }
  Tensor v = global;
  for (std::size_t d = 0; d < shape.size(); ++d)
    v = v.narrow(static_cast<std::int64_t>(d), off[d], shape[d]);
  return v.clone();
}

}  // namespace

DTensor::DTensor(Tensor local, DTensorSpec spec) : local_(std::move(local)), spec_(spec) {
  check_arg(local_.defined(), "dtensor", "DTensor: the local tensor is undefined");
  // A local tensor on another device than its mesh would reach a backend
  // that cannot read it (e.g. Gloo given CUDA memory): refuse it here, by name.
  DTENSOR_CHECK_ARG(local_.device().type == spec_.mesh().device_type(), "dtensor",
                    "device: the local tensor is on {} but {} is a {} mesh",
                    device_type_name(local_.device().type), spec_.mesh().str(),
                    device_type_name(spec_.mesh().device_type()));
  DTENSOR_CHECK_ARG(local_.dtype() == spec_.dtype(), "dtensor",
                    "DTensor: local dtype {} but spec says {}", dtype_name(local_.dtype()),
                    dtype_name(spec_.dtype()));
  DTENSOR_CHECK_ARG(local_.shape() == spec_.local_shape(), "dtensor",
                    "DTensor: local shape {} does not match {} (expected {})",
                    shape_str(local_.shape()), spec_.str(), shape_str(spec_.local_shape()));
}

namespace {

// With the global shape given, every rank must have been given the same
// shape and placements, and every rank's local tensor must fit them. A rank
// that raised alone would leave the others waiting in their next
// collective, so the ranks compare first (one agreement check, one small
// all-gather of the local shapes) and then all raise the same error.
DTensor from_local_with_shape(const Tensor& local, const DeviceMesh& mesh,
                              const Placements& placements, const Shape& global_shape) {
  std::optional<DTensorSpec> spec;
  std::exception_ptr invalid;  // the same on every rank that agrees on the arguments
  try {
    spec.emplace(mesh, placements, global_shape, local.dtype());
  } catch (const InvalidArgument&) {
    invalid = std::current_exception();
  }
  if (!mesh.contains_this_rank()) {
    if (invalid) std::rethrow_exception(invalid);
    return DTensor(local, *spec);
  }
  auto group = mesh.get_mesh_group();
  std::size_t h = std::hash<std::string>()(shape_str(global_shape) + placements_str(placements));
  h ^= static_cast<std::size_t>(local.dtype()) * 0x9e3779b97f4a7c15ull;
  check_ranks_agree(*group, h, "from_local",
                    fmt::format("global shape {} placed {} ({})", shape_str(global_shape),
                                placements_str(placements), dtype_name(local.dtype())));
  if (invalid) std::rethrow_exception(invalid);
  // Every rank's local shape (-1s for a tensor of another rank), so that
  // all name the first rank that does not fit, alike.
  const auto nd = static_cast<std::int64_t>(global_shape.size());
  Tensor mine = Tensor::full({nd}, -1.0, DType::F64);
  if (local.dim() == nd)
    for (std::int64_t d = 0; d < nd; ++d)
      mine.data<double>()[d] = static_cast<double>(local.size(d));
  const int n = group->size();
  Tensor all = Tensor::empty({n * nd}, DType::F64);
  group->allgather(mine, all, std::vector<std::int64_t>(static_cast<std::size_t>(n), nd));
  for (int r = 0; r < n; ++r) {
    const int world_rank = group->global_ranks()[static_cast<std::size_t>(r)];
    const Shape need = spec->local_shape_at(*mesh.coordinate_of(world_rank));
    Shape held(static_cast<std::size_t>(nd));
    for (std::int64_t d = 0; d < nd; ++d)
      held[static_cast<std::size_t>(d)] = static_cast<std::int64_t>(all.item({r * nd + d}));
    DTENSOR_CHECK_ARG(
        held == need, "dtensor",
        "from_local: rank {} holds a local shape {} but {} with global shape {} needs {}",
        world_rank, held.empty() || held[0] >= 0 ? shape_str(held) : std::string("of another rank"),
        placements_str(spec->placements()), shape_str(global_shape), shape_str(need));
  }
  return DTensor(local, *spec);
}

}  // namespace

DTensor DTensor::from_local(const Tensor& local, const DeviceMesh& mesh,
                            const Placements& placements,
                            const std::optional<Shape>& global_shape) {
  check_arg(local.defined(), "dtensor", "from_local: the local tensor is undefined");
  if (global_shape) return from_local_with_shape(local, mesh, placements, *global_shape);
  // Derive the global shape: gather every rank's local shape over the mesh.
  auto group = mesh.get_mesh_group();
  const std::int64_t nd = local.dim();
  check_ranks_agree(*group,
                    static_cast<std::size_t>(nd) * 7919 + static_cast<std::size_t>(local.dtype()),
                    "from_local", fmt::format("rank-{} {} tensor", nd, dtype_name(local.dtype())));
  const int n = group->size();
  Tensor mine = Tensor::empty({nd}, DType::F64);
  for (std::int64_t d = 0; d < nd; ++d)
    mine.data<double>()[d] = static_cast<double>(local.size(d));
  Tensor all = Tensor::empty({n * nd}, DType::F64);
  group->allgather(mine, all, std::vector<std::int64_t>(n, nd));
  auto shape_of = [&](const std::vector<std::int64_t>& coord) {
    const int g = mesh_group_rank_of(mesh, mesh.rank_at(coord));
    Shape s(nd);
    for (std::int64_t d = 0; d < nd; ++d)
      s[d] = static_cast<std::int64_t>(all.item({g * nd + d}));
    return s;
  };
  // Along each sharded tensor dim, the global extent is the sum over the mesh
  // dims that shard it (other coordinates at 0); every rank computes the same.
  DTensorSpec probe(mesh, placements, local.shape(), local.dtype());  // validates placements
  Shape global = shape_of(std::vector<std::int64_t>(mesh.ndim(), 0));
  for (std::int64_t d = 0; d < nd; ++d) {
    const auto dims = probe.mesh_dims_sharding(d);
    if (dims.empty()) continue;
    std::int64_t total = 0;
    std::vector<std::int64_t> c(mesh.ndim(), 0);
    while (true) {
      total += shape_of(c)[d];
      std::size_t k = dims.size();
      while (k-- > 0) {
        if (++c[dims[k]] < mesh.size(dims[k])) break;
        c[dims[k]] = 0;
      }
      if (k == static_cast<std::size_t>(-1)) break;
    }
    global[d] = total;
  }
  DTensorSpec spec(mesh, placements, global, local.dtype());
  // Every rank checks every rank's shape, so all reach the same verdict.
  for (std::int64_t f = 0; f < mesh.size(); ++f) {
    const auto coord = *mesh.coordinate_of(mesh.ranks()[f]);
    DTENSOR_CHECK_ARG(
        shape_of(coord) == spec.local_shape_at(coord), "dtensor",
        "from_local: rank {} holds a local shape {} but {} with global shape {} needs {} "
        "(torch.chunk rule); pass global_shape or fix the shards",
        mesh.ranks()[f], shape_str(shape_of(coord)), placements_str(spec.placements()),
        shape_str(global), shape_str(spec.local_shape_at(coord)));
  }
  return DTensor(local, spec);
}

DTensor DTensor::redistribute(const DeviceMesh& mesh, const Placements& placements) const {
  detail::CommScope scope("redistribute");
  DTENSOR_CHECK_ARG(mesh == spec_.mesh(), "redistribute",
                    "mesh: redistributing to another mesh is not supported ({} -> {})",
                    spec_.mesh().str(), mesh.str());
  // Agreement comes before any validation of the target: a rank whose target
  // is invalid must not throw alone while the others wait in a collective
  // (they would hang until the timeout). An invalid target enters the
  // fingerprint as its error message, so ranks that all pass the same invalid
  // target agree and all raise the same InvalidArgument below.
  std::size_t target_hash = 0;
  std::optional<InvalidArgument> invalid;
  try {
    target_hash = DTensorSpec(mesh, placements, spec_.shape(), dtype()).hash();
  } catch (const InvalidArgument& e) {
    invalid = e;
    target_hash = std::hash<std::string>()(e.what());
  }
  // The check is posted here and confirmed before anything waits; a lone
  // small reduction (a loss, a norm of Partial sums) posts its messages first,
  // under a tag of this call's own, so the check travels with them.
  // (The call's tag is taken by every call, whatever it turns out to need, so
  // that ranks that disagree here still number their later calls alike.)
  CheckedCall call(mesh.get_mesh_group(), spec_.hash() * 31 + target_hash, "redistribute",
                   agreement_description(
                       [&] { return spec_.str() + " -> [" + placements_str(placements) + "]"; }));
  if (invalid) {
    call.agreement.confirm();
    throw *invalid;
  }
  const auto steps = call.local([&] { return plan_redistribute(spec_, placements); });
  // Mesh dims of one rank change placement without a step (their data is the
  // same under any placement), so the spec is the target's, not the last step's.
  DTensorSpec target(mesh, placements, spec_.shape(), dtype());
  std::optional<DirectAllreduce> started;
  if (steps.size() == 1) started = start_reduction(local_, spec_, steps[0], call.tag);
  call.agreement.confirm();
  Tensor cur;
  if (started) {
    cur = started->finish();
  } else {
    if (steps.empty() && target == spec_) return *this;
    cur = local_;
    Placements cur_p = spec_.placements();
    DTensorSpec cur_spec = spec_;
    for (const auto& step : steps) {
      cur_p[step.mesh_dim] = step.to;
      DTensorSpec next(mesh, cur_p, spec_.shape(), dtype());
      log::debug("redistribute {}: {}", spec_.str(), step.str());
      cur = apply_redistribute_step(cur, cur_spec, next, step);
      cur_spec = next;
    }
  }
  DTensor out(cur, target);
  if (requires_grad() && detail::redistribute_recorder())
    return detail::redistribute_recorder()(*this, std::move(out));
  return out;
}

DTensor& DTensor::requires_grad_(bool enabled) {
  if (!enabled && !is_leaf())
    throw InvalidArgument(
        "requires_grad",
        "requires_grad_(false) on the result of a recorded operator: detach() it instead");
  if (!autograd_) {
    if (!enabled) return *this;
    autograd_ = std::make_shared<AutogradMeta>();
  }
  autograd_->requires_grad = enabled;
  return *this;
}

std::optional<DTensor> DTensor::grad() const {
  if (!autograd_ || !autograd_->grad) return std::nullopt;
  return *autograd_->grad;
}

void DTensor::set_grad(const std::optional<DTensor>& grad) {
  if (!grad) {
    if (autograd_) autograd_->grad.reset();
    return;
  }
  DTENSOR_CHECK_ARG(grad->spec() == spec_, "grad",
                    "set_grad: the gradient is {} but the tensor is {}", grad->spec().str(),
                    spec_.str());
  if (!autograd_) autograd_ = std::make_shared<AutogradMeta>();
  autograd_->grad = std::make_shared<DTensor>(grad->detach());
}

std::shared_ptr<autograd::Node> DTensor::grad_fn() const {
  return autograd_ ? autograd_->grad_fn : nullptr;
}

Tensor DTensor::full_tensor() const {
  detail::CommScope scope("full_tensor");
  return redistribute(mesh(), Placements(mesh().ndim(), Replicate())).to_local();
}

double DTensor::item() const {
  // Checked before any communication: the global shape is the same on every
  // rank, so every rank raises alike.
  DTENSOR_CHECK_ARG(shape_numel(shape()) == 1, "dtensor",
                    "item: the tensor has numel {} (shape {}); item() needs exactly one element",
                    shape_numel(shape()), shape_str(shape()));
  return full_tensor().to(Device::cpu()).item_flat(0);
}

DTensor distribute_tensor(const Tensor& global, const DeviceMesh& mesh,
                          const Placements& placements, int src) {
  detail::CommScope scope("distribute_tensor");
  mesh.require_member("distribute_tensor");
  DTENSOR_CHECK_ARG(mesh.coordinate_of(src).has_value(), "dtensor",
                    "distribute_tensor: src rank {} is not in {}", src, mesh.str());
  auto group = mesh.get_mesh_group();
  const int src_g = mesh_group_rank_of(mesh, src);
  const bool i_am_src = group->rank() == src_g;
  // Ranks that disagree on the source would broadcast from different roots
  // (a hang), and on the placements would cut and receive different shapes.
  check_ranks_agree(
      *group,
      std::hash<std::string>()(placements_str(placements)) * 31 + static_cast<std::size_t>(src),
      "distribute_tensor", fmt::format("src {} placements [{}]", src, placements_str(placements)));
  // Shape and dtype travel from the source: the other ranks need not know them.
  // The source's own mistakes travel too (meta[0] < 0), so that every rank
  // raises the same error instead of the source alone while the others wait.
  constexpr double kUndefined = -1, kTooManyDims = -2;
  Tensor meta = Tensor::zeros({10}, DType::F64);
  if (i_am_src) {
    if (!global.defined()) {
      meta.data<double>()[0] = kUndefined;
    } else if (global.dim() > 8) {
      meta.data<double>()[0] = kTooManyDims;
      meta.data<double>()[1] = static_cast<double>(global.dim());
    } else {
      meta.data<double>()[0] = static_cast<double>(global.dtype());
      meta.data<double>()[1] = static_cast<double>(global.dim());
      for (std::int64_t d = 0; d < global.dim(); ++d)
        meta.data<double>()[2 + d] = static_cast<double>(global.size(d));
    }
  }
  group->broadcast(meta, src_g);
  check_arg(meta.item({0}) != kUndefined, "dtensor",
            "distribute_tensor: the source rank {} passed an undefined tensor", src);
  DTENSOR_CHECK_ARG(meta.item({0}) != kTooManyDims, "dtensor",
                    "distribute_tensor: the source's tensor has {} dims; at most 8 are supported",
                    meta.item({1}));
  const auto dtype = static_cast<DType>(static_cast<int>(meta.item({0})));
  Shape shape(static_cast<std::size_t>(meta.item({1})));
  for (std::size_t d = 0; d < shape.size(); ++d)
    shape[d] = static_cast<std::int64_t>(meta.item({static_cast<std::int64_t>(2 + d)}));
  DTensorSpec spec(mesh, placements, shape, dtype);
  if (i_am_src) {
    // The source cuts each rank's part and sends it; no rank sees more than its own.
    std::vector<Tensor> parts;
    std::vector<P2POp> ops;
    Tensor mine;
    const Tensor host_global = global.to(Device::cpu());
    for (std::int64_t f = 0; f < mesh.size(); ++f) {
      const int w = mesh.ranks()[f];
      // Parts travel from host memory (receivers cannot know the source's
      // device); each rank moves its own to the mesh's device.
      Tensor part = local_part(host_global, spec, *mesh.coordinate_of(w));
      if (mesh_group_rank_of(mesh, w) == src_g) {
        mine = part;
      } else if (part.numel() > 0) {
        ops.push_back(P2POp::send(part, mesh_group_rank_of(mesh, w)));
        parts.push_back(part);
      }
    }
    auto works = group->batch_isend_irecv(ops);
    wait_all(works);
    return DTensor(mine.to(mesh.device()), spec);
  }
  Tensor mine = Tensor::empty(spec.local_shape(), dtype);
  if (mine.numel() > 0) {
    auto w = group->irecv(mine, src_g);
    w->wait();
  }
  return DTensor(mine.to(mesh.device()), spec);
}

}  // namespace dtensor
