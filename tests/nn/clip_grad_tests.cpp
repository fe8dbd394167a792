// clip_grad_norm_ on distributed gradients against a naive f64 norm of the
// whole gradients: sharded, replicated and Partial gradients together on a
// 2-rank mesh and on a 2x2 mesh (where a gradient can be sharded along one
// mesh dim and replicated along the other), norms 2, 3 and infinity, with
// and without clipping, and the error messages.
#include <catch2/catch.hpp>
#include <cmath>

#include "dtensor/dtensor.h"
#include "dtensor/testing.h"

using namespace dtensor;
using Catch::Contains;

namespace {

double naive_norm(const std::vector<Tensor>& gs, double p) {
  double acc = 0;
  for (const Tensor& g : gs)
    for (std::int64_t i = 0; i < g.numel(); ++i) {
      const double a = std::abs(g.item_flat(i));
      acc = std::isinf(p) ? std::max(acc, a) : acc + std::pow(a, p);
    }
  return std::isinf(p) ? acc : std::pow(acc, 1 / p);
}

// Gradients placed as `pls` (a Partial one built from uneven local parts),
// clipped to max_norm = total * `fraction`; checks the returned norm and
// every clipped gradient.
void check(const DeviceMesh& mesh, const std::vector<Placements>& pls, double p, double fraction) {
  INFO("mesh " << mesh.str() << " norm " << p << " fraction " << fraction);
  std::vector<Tensor> full;
  std::vector<DTensor> params;
  params.reserve(pls.size());
  for (std::size_t i = 0; i < pls.size(); ++i) {
    const Tensor W = Tensor::rand({6, 4}, DType::F64, 10 + i);
    full.push_back(Tensor::rand({6, 4}, DType::F64, 20 + i));
    // A gradient is placed like its parameter: a Partial one belongs to a
    // Partial parameter.
    params.push_back(distribute_tensor(W, mesh, pls[i]));
    params.back().requires_grad_();
  }
  for (std::size_t i = 0; i < pls.size(); ++i) {
    const Placements& pl = pls[i];
    const auto partial = std::find_if(pl.begin(), pl.end(), [](auto& x) { return x.is_partial(); });
    if (partial == pl.end()) {
      params[i].set_grad(distribute_tensor(full[i], mesh, pl));
      continue;
    }
    // Local parts 1/4 and 3/4 of the value along the Partial dim (exact in
    // binary): a norm of the local parts alone would be wrong.
    const auto d = static_cast<std::int64_t>(partial - pl.begin());
    Placements rest = pl;
    rest[static_cast<std::size_t>(d)] = Replicate();
    Tensor local = distribute_tensor(full[i], mesh, rest).to_local().clone();
    const double w = mesh.get_local_rank(d) == 0 ? 0.25 : 0.75;
    for (std::int64_t k = 0; k < local.numel(); ++k)
      local.data<double>()[k] *= w;
    params[i].set_grad(DTensor::from_local(local, mesh, pl, Shape{6, 4}));
  }
  const double want = naive_norm(full, p);
  std::vector<DTensor*> ptrs;
  for (auto& w : params)
    ptrs.push_back(&w);
  const double got = nn::clip_grad_norm_(ptrs, want * fraction, p);
  CHECK(std::abs(got - want) <= 1e-13 * want);
  const double coef = std::min(1.0, want * fraction / (want + 1e-6));
  for (std::size_t i = 0; i < params.size(); ++i) {
    INFO("gradient " << i << " placed " << placements_str(pls[i]));
    const Tensor g = params[i].grad()->full_tensor();
    for (std::int64_t k = 0; k < g.numel(); ++k)
      CHECK(std::abs(g.item_flat(k) - full[i].item_flat(k) * coef) <= 1e-14);
  }
}

}  // namespace

DTENSOR_TEST_CASE("clip_grad_norm_ on 2 ranks: sharded, replicated and Partial gradients",
                  "[clip_grad]", 2) {
  const DeviceMesh mesh(DeviceType::CPU, {2});
  const std::vector<Placements> pls{{Shard(0)}, {Replicate()}, {Shard(1)}, {Partial()}};
  for (double p : {2.0, 3.0, nn::kInfNorm})
    for (double fraction : {0.3, 2.0})
      check(mesh, pls, p, fraction);
}

DTENSOR_TEST_CASE("clip_grad_norm_ on a 2x2 mesh counts replicated copies once", "[clip_grad]", 4) {
  const DeviceMesh mesh(DeviceType::CPU, {2, 2});
  const std::vector<Placements> pls{{Shard(0), Replicate()},
                                    {Replicate(), Shard(1)},
                                    {Replicate(), Replicate()},
                                    {Shard(0), Shard(1)},
                                    {Shard(1), Partial()}};
  for (double p : {2.0, nn::kInfNorm})
    check(mesh, pls, p, 0.5);
}

DTENSOR_TEST_CASE("clip_grad_norm_ errors name the argument", "[clip_grad]", 1) {
  const DeviceMesh mesh(DeviceType::CPU, {1});
  DTensor w = distribute_tensor(Tensor::rand({3}, DType::F64, 1), mesh, {Replicate()});
  std::vector<DTensor*> ps{&w};
  CHECK(nn::clip_grad_norm_(ps, 1.0) == 0);  // no gradient: norm 0, nothing to clip
  w.set_grad(distribute_tensor(Tensor::rand({3}, DType::F64, 2), mesh, {Replicate()}));
  CHECK_THROWS_AS(nn::clip_grad_norm_(ps, -1.0), InvalidArgument);
  CHECK_THROWS_WITH(nn::clip_grad_norm_(ps, -1.0), Contains("max_norm -1"));
  CHECK_THROWS_WITH(nn::clip_grad_norm_(ps, 1.0, 0.0), Contains("norm_type 0"));
}
