#include "dtensor/nn/clip_grad.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "dtensor/core/errors.h"
#include "dtensor/ops/autograd.h"
#include "dtensor/ops/kernels/optim.h"

namespace dtensor::nn {
namespace {

// Whether this rank's shard of a tensor placed `pl` is the one that counts:
// along a Replicate dim every coordinate holds the same data, so only
// coordinate 0 contributes; Shard dims hold disjoint pieces, all count.
bool counts_here(const DeviceMesh& mesh, const Placements& pl) {
  for (std::size_t d = 0; d < pl.size(); ++d)
    if (pl[d].is_replicate() && mesh.get_local_rank(static_cast<std::int64_t>(d)) != 0)
      return false;
  return true;
}

bool has_partial(const Placements& pl) {
  return std::any_of(pl.begin(), pl.end(), [](const Placement& p) { return p.is_partial(); });
}

}  // namespace

double clip_grad_norm_(const std::vector<DTensor*>& params, double max_norm, double norm_type) {
  check_arg(std::isfinite(max_norm) && max_norm >= 0, "clip_grad_norm_",
            "max_norm {} must be finite and >= 0", max_norm);
  check_arg(norm_type > 0, "clip_grad_norm_", "norm_type {} must be > 0 (or infinity)", norm_type);
  NoGradGuard no_grad;
  const bool inf = std::isinf(norm_type);
  std::vector<DTensor*> with_grad;
  for (DTensor* p : params) {
    check_arg(p != nullptr, "clip_grad_norm_", "a null parameter");
    if (p->grad()) with_grad.push_back(p);
  }
  if (with_grad.empty()) return 0;
  const DeviceMesh mesh = with_grad.front()->grad()->mesh();
  mesh.require_member("clip_grad_norm_");

  // This rank's part of each gradient's norm.
  Tensor parts = Tensor::zeros({static_cast<std::int64_t>(with_grad.size())}, DType::F64);
  for (std::size_t i = 0; i < with_grad.size(); ++i) {
    DTensor* p = with_grad[i];
    DTensor g = *p->grad();
    DTENSOR_CHECK_ARG(
        g.mesh() == mesh, "clip_grad_norm_",
        "parameter {}: its gradient is on {}, the first one's on {} (one mesh for all)", i,
        g.mesh().str(), mesh.str());
    DTENSOR_CHECK_ARG(g.dtype() == DType::F32 || g.dtype() == DType::F64, "clip_grad_norm_",
                      "parameter {}: an {} gradient (f32 and f64 are clipped)", i,
                      dtype_name(g.dtype()));
    if (has_partial(g.placements())) {
      // The norm needs the sums; the gradient itself stays as it is (its
      // spec is its parameter's), and scaling its parts scales the sum.
      Placements reduced = g.placements();
      for (auto& pl : reduced)
        if (pl.is_partial()) pl = Replicate();
      g = g.redistribute(mesh, reduced);
    }
    if (!counts_here(mesh, g.placements())) continue;
    kernels::NormPartArgs a;
    a.input = g.to_local().contiguous();
    a.norm_type = norm_type;
    a.result = Tensor::zeros({}, DType::F64);
    run_kernel(kernels::kNormPart, a.input.device().type, a.input.dtype(), a);
    parts.data<double>()[i] = a.result.item_flat(0);
  }
  // The one collective: every gradient's parts at once.
  mesh.get_mesh_group()->allreduce(parts, inf ? ReduceOp::Max : ReduceOp::Sum);

  // torch: the norm of the stacked per-gradient norms.
  const double* s = parts.data<double>();
  const auto n = static_cast<std::size_t>(parts.numel());
  double total = 0;
  if (inf) {
    for (std::size_t i = 0; i < n; ++i)
      total = total < s[i] || std::isnan(s[i]) ? s[i] : total;
  } else if (norm_type == 2) {
    for (std::size_t i = 0; i < n; ++i) {
      const double norm = std::sqrt(s[i]);
      total += norm * norm;
    }
    total = std::sqrt(total);
  } else {
    for (std::size_t i = 0; i < n; ++i)
      total += std::pow(std::pow(s[i], 1 / norm_type), norm_type);
    total = std::pow(total, 1 / norm_type);
  }
  const double coef = std::min(max_norm / (total + 1e-6), 1.0);  // NaN stays NaN
  if (coef == 1.0) return total;  // torch multiplies by 1: nothing changes
  for (DTensor* p : with_grad) {
    DTensor g = *p->grad();
    Tensor local = g.to_local();
    if (!local.is_contiguous()) {
      local = local.contiguous();
      p->set_grad(DTensor(local, g.spec()));
    }
    kernels::ScaleInPlaceArgs a;
    a.tensor = local;
    a.scale = coef;
    run_kernel(kernels::kScaleInPlace, local.device().type, local.dtype(), a);
  }
  return total;
}

double clip_grad_norm_(const NamedParameters& params, double max_norm, double norm_type) {
  std::vector<DTensor*> ps;
  ps.reserve(params.size());
  for (const auto& [name, p] : params)
    ps.push_back(p);
  return clip_grad_norm_(ps, max_norm, norm_type);
}

}  // namespace dtensor::nn
