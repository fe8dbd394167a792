// batch_norm, group_norm, instance_norm and layer_norm against naive f64
// loops written here (sharing no code with the library: the statistics are
// plain two-pass loops, grad_input comes from the explicit Jacobian of each
// statistic rather than the closed form the library uses), over seeded random
// configurations on meshes 2, 3, 4 and 2x2 (and a few on 2x2x2): batch,
// channel and spatial sharding mixed, nested, uneven and empty shards, 0 to
// 3 spatial dims, affine or not, group counts that split a channel shard;
// forward and backward (grad_input, grad_weight, grad_bias), batch_norm's
// running statistics over 3 steps and its eval mode.
//
// And the communication: one collective per pass over the group that spans
// the mesh dims sharding the reduced dims (the backward with batch
// statistics: one to recompute them, one for the gradient sums), nothing on
// any other group, and not a byte anywhere when no reduced dim is sharded.
// The mesh is built over a world group that counts every collective of it
// and of every group made from it; the agreement check (point to point) is
// switched off there so that the byte counters see only the operator.
#include <fmt/format.h>
#include <catch2/catch.hpp>
#include <cmath>
#include <map>
#include <random>

#include "dtensor/core/device_mesh.h"
#include "dtensor/core/forwarding_process_group.h"
#include "dtensor/ops/normalization.h"
#include "tests/support/multiprocess.h"
#include "tests/support/registration.h"

using namespace dtensor;
using namespace dtensor::testing;

namespace {

using Rng = std::mt19937_64;
std::int64_t uni(Rng& rng, std::int64_t lo, std::int64_t hi) {
  return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
}

enum class Kind { Batch, Group, Instance, Layer };
const char* kind_name(Kind k) {
  switch (k) {
    case Kind::Batch:
      return "batch_norm";
    case Kind::Group:
      return "group_norm";
    case Kind::Instance:
      return "instance_norm";
    case Kind::Layer:
      return "layer_norm";
  }
  return "?";
}

// ---------------------------------------------------------------------------
// The reference: naive f64 loops over the global tensor.

std::vector<double> values(const Tensor& t) {
  const Tensor d = t.to(DType::F64).contiguous();
  std::vector<double> v(static_cast<std::size_t>(d.numel()));
  for (std::int64_t i = 0; i < d.numel(); ++i)
    v[static_cast<std::size_t>(i)] = d.item_flat(i);
  return v;
}

struct RefLayout {
  Kind kind;
  std::int64_t N, C, S, groups;
  // Every statistic's members (flat indices), and each element's parameter.
  std::vector<std::vector<std::int64_t>> members() const {
    std::vector<std::vector<std::int64_t>> out;
    auto at = [&](std::int64_t n, std::int64_t c, std::int64_t s) { return (n * C + c) * S + s; };
    if (kind == Kind::Batch) {
      for (std::int64_t c = 0; c < C; ++c) {
        out.emplace_back();
        for (std::int64_t n = 0; n < N; ++n)
          for (std::int64_t s = 0; s < S; ++s)
            out.back().push_back(at(n, c, s));
      }
    } else if (kind == Kind::Instance) {
      for (std::int64_t n = 0; n < N; ++n)
        for (std::int64_t c = 0; c < C; ++c) {
          out.emplace_back();
          for (std::int64_t s = 0; s < S; ++s)
            out.back().push_back(at(n, c, s));
        }
    } else if (kind == Kind::Group) {
      const std::int64_t per = C / groups;
      for (std::int64_t n = 0; n < N; ++n)
        for (std::int64_t g = 0; g < groups; ++g) {
          out.emplace_back();
          for (std::int64_t c = g * per; c < (g + 1) * per; ++c)
            for (std::int64_t s = 0; s < S; ++s)
              out.back().push_back(at(n, c, s));
        }
    } else {
      for (std::int64_t n = 0; n < N; ++n) {
        out.emplace_back();
        for (std::int64_t c = 0; c < C; ++c)
          for (std::int64_t s = 0; s < S; ++s)
            out.back().push_back(at(n, c, s));
      }
    }
    return out;
  }
  std::int64_t param_of(std::int64_t flat) const {
    return kind == Kind::Layer ? flat % (C * S) : (flat / S) % C;
  }
  std::int64_t params() const { return kind == Kind::Layer ? C * S : C; }
};

RefLayout layout_of(Kind kind, const Shape& x, std::int64_t groups) {
  std::int64_t S = 1;
  for (std::size_t d = 2; d < x.size(); ++d)
    S *= x[d];
  return {kind, x[0], x[1], S, groups};
}

struct RefForward {
  std::vector<double> y, mean, var;  // per statistic: mean and biased variance
  std::vector<std::size_t> count;
};

RefForward ref_forward(const RefLayout& L, const std::vector<double>& x,
                       const std::vector<double>& w, const std::vector<double>& b, double eps) {
  RefForward r;
  r.y.assign(x.size(), 0.0);
  for (const auto& m : L.members()) {
    double mean = 0;
    for (auto i : m)
      mean += x[i];
    mean = m.empty() ? 0 : mean / static_cast<double>(m.size());
    double var = 0;
    for (auto i : m)
      var += (x[i] - mean) * (x[i] - mean);
    var = m.empty() ? 0 : var / static_cast<double>(m.size());
    for (auto i : m) {
      const auto p = L.param_of(i);
      r.y[i] = (x[i] - mean) / std::sqrt(var + eps) * (w.empty() ? 1.0 : w[p]) +
               (b.empty() ? 0.0 : b[p]);
    }
    r.mean.push_back(mean);
    r.var.push_back(var);
    r.count.push_back(m.size());
  }
  return r;
}

struct RefGrads {
  std::vector<double> gx, gw, gb;
};

// grad_input from the Jacobian of each statistic's normalisation:
// d xhat_i / d x_j = invstd * (delta_ij - 1/M - xhat_i * xhat_j / M).
RefGrads ref_backward(const RefLayout& L, const std::vector<double>& x,
                      const std::vector<double>& dy, const std::vector<double>& w, double eps) {
  RefGrads g;
  g.gx.assign(x.size(), 0.0);
  g.gw.assign(static_cast<std::size_t>(L.params()), 0.0);
  g.gb.assign(static_cast<std::size_t>(L.params()), 0.0);
  const RefForward f = ref_forward(L, x, {}, {}, eps);
  const auto members = L.members();
  for (std::size_t k = 0; k < members.size(); ++k) {
    const auto& m = members[k];
    const double invstd = 1 / std::sqrt(f.var[k] + eps), M = static_cast<double>(m.size());
    for (auto i : m) {
      g.gw[L.param_of(i)] += dy[i] * f.y[i];
      g.gb[L.param_of(i)] += dy[i];
    }
    for (auto j : m) {
      double acc = 0;
      for (auto i : m) {
        const double wi = w.empty() ? 1.0 : w[L.param_of(i)];
        const double jac = invstd * ((i == j ? 1.0 : 0.0) - 1 / M - f.y[i] * f.y[j] / M);
        acc += dy[i] * wi * jac;
      }
      g.gx[j] = acc;
    }
  }
  return g;
}

// batch_norm in eval mode: the running statistics are constants.
std::vector<double> ref_eval_forward(const RefLayout& L, const std::vector<double>& x,
                                     const std::vector<double>& rm, const std::vector<double>& rv,
                                     const std::vector<double>& w, const std::vector<double>& b,
                                     double eps) {
  std::vector<double> y(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const auto c = L.param_of(static_cast<std::int64_t>(i));
    y[i] = (x[i] - rm[c]) / std::sqrt(rv[c] + eps) * (w.empty() ? 1.0 : w[c]) +
           (b.empty() ? 0.0 : b[c]);
  }
  return y;
}

RefGrads ref_eval_backward(const RefLayout& L, const std::vector<double>& x,
                           const std::vector<double>& dy, const std::vector<double>& rm,
                           const std::vector<double>& rv, const std::vector<double>& w,
                           double eps) {
  RefGrads g;
  g.gx.assign(x.size(), 0.0);
  g.gw.assign(static_cast<std::size_t>(L.C), 0.0);
  g.gb.assign(static_cast<std::size_t>(L.C), 0.0);
  for (std::size_t i = 0; i < x.size(); ++i) {
    const auto c = L.param_of(static_cast<std::int64_t>(i));
    const double invstd = 1 / std::sqrt(rv[c] + eps);
    g.gx[i] = dy[i] * (w.empty() ? 1.0 : w[c]) * invstd;
    g.gw[c] += dy[i] * (x[i] - rm[c]) * invstd;
    g.gb[c] += dy[i];
  }
  return g;
}

// ---------------------------------------------------------------------------
// Random configurations.

struct Case {
  Kind kind;
  Shape input;
  std::int64_t groups = 1;
  bool affine = false;
  bool training = true;
  bool running = false;  // batch_norm: running statistics given
  double momentum = 0.1, eps = 1e-5;
  double offset = 0;  // added to the input: a mean far from zero
  Placements placements;
  std::uint64_t seed = 0;
  std::string str() const {
    return fmt::format(
        "{} input {} groups {} affine {} training {} running {} momentum {} eps {} offset {} "
        "placements {} seed {}",
        kind_name(kind), shape_str(input), groups, affine, training, running, momentum, eps, offset,
        placements_str(placements), seed);
  }
};

Placements random_placements(Rng& rng, const Shape& mesh, std::int64_t ndim) {
  Placements out;
  std::vector<std::int64_t> used;
  for (std::size_t m = 0; m < mesh.size(); ++m) {
    const std::int64_t pick = uni(rng, 0, 9);
    std::int64_t d = pick <= 1 ? 0 : pick <= 3 ? 1 : pick <= 7 ? 2 : -1;
    if (d == 2) d = ndim > 2 ? uni(rng, 2, ndim - 1) : uni(rng, 0, 1);
    const bool nested_ok = uni(rng, 0, 9) == 0;
    if (d >= 0 && (nested_ok || std::find(used.begin(), used.end(), d) == used.end())) {
      used.push_back(d);
      out.push_back(Shard(d));
    } else {
      out.push_back(Replicate());
    }
  }
  return out;
}

Case random_case(Rng& rng, Kind kind, const Shape& mesh) {
  Case c;
  c.kind = kind;
  c.seed = rng();
  while (true) {
    const std::int64_t nsp = kind == Kind::Instance ? uni(rng, 1, 3) : uni(rng, 0, 3);
    const std::int64_t max_len = nsp == 1 ? 12 : nsp == 2 ? 6 : 4;
    c.input = {uni(rng, 0, 9) == 0 ? 0 : uni(rng, 1, 4), 0};
    if (kind == Kind::Group) {
      c.groups = uni(rng, 1, 4);
      c.input[1] = c.groups * uni(rng, 1, 3);
    } else {
      c.input[1] = uni(rng, 1, 5);
    }
    std::int64_t S = 1;
    for (std::int64_t d = 0; d < nsp; ++d)
      S *= c.input.emplace_back(uni(rng, 1, max_len));
    if (kind == Kind::Batch && c.input[0] * S == 1) continue;  // training needs 2 values
    if (kind == Kind::Instance && S == 1) continue;
    break;
  }
  c.affine = uni(rng, 0, 2) != 0;
  if (kind == Kind::Batch) {
    c.training = uni(rng, 0, 3) != 0;
    c.running = !c.training || uni(rng, 0, 1) == 1;
    c.momentum = uni(rng, 0, 1) ? 0.1 : 0.3;
  }
  c.eps = uni(rng, 0, 1) ? 1e-5 : 1e-3;
  c.offset = uni(rng, 0, 3) == 0 ? 50.0 : 0.0;
  c.placements = random_placements(rng, mesh, static_cast<std::int64_t>(c.input.size()));
  return c;
}

void require_close(const Tensor& got, const std::vector<double>& want, double tol,
                   const char* what) {
  const auto g = values(got);
  REQUIRE(g.size() == want.size());
  for (std::size_t i = 0; i < g.size(); ++i) {
    INFO(what << " element " << i << ": " << g[i] << " vs " << want[i]);
    REQUIRE(std::abs(g[i] - want[i]) <= tol * std::max(1.0, std::abs(want[i])));
  }
}

Tensor random_tensor(const Shape& shape, DType dtype, std::uint64_t seed, double scale,
                     double offset) {
  Tensor t = Tensor::rand(shape, DType::F64, seed);
  double* p = t.data<double>();
  for (std::int64_t i = 0; i < t.numel(); ++i)
    p[i] = p[i] * scale + offset;
  return t.to(dtype);
}

void check_case(const Case& c, const Shape& mesh_shape, DType dtype) {
  INFO(c.str() << " dtype " << dtype_name(dtype));
  DeviceMesh mesh(DeviceType::CPU, mesh_shape);
  const double tol = dtype == DType::F64 ? 1e-10 : 1e-5;
  const Shape pshape =
      c.kind == Kind::Layer ? Shape(c.input.begin() + 1, c.input.end()) : Shape{c.input[1]};
  const Placements rep(mesh_shape.size(), Replicate());
  std::optional<DTensor> w, b;
  std::vector<double> wv, bv;
  if (c.affine) {
    const Tensor W = random_tensor(pshape, dtype, c.seed + 10, 1.0, 1.0);
    const Tensor B = random_tensor(pshape, dtype, c.seed + 11, 1.0, 0.0);
    w.emplace(distribute_tensor(W, mesh, rep));
    b.emplace(distribute_tensor(B, mesh, rep));
    wv = values(W);
    bv = values(B);
  }
  const RefLayout L = layout_of(c.kind, c.input, c.groups);
  const Tensor X0 = random_tensor(c.input, dtype, c.seed, 1.0, c.offset);
  const DTensor x0 = distribute_tensor(X0, mesh, c.placements);
  const Tensor GY = random_tensor(c.input, dtype, c.seed + 1, 1.0, 0.0);
  const auto xv0 = values(X0), gyv = values(GY);

  auto check_grads = [&](const NormGrads& g, const RefGrads& r, const DTensor& x) {
    REQUIRE(g.grad_input);
    CHECK(g.grad_input->placements() == x.placements());
    require_close(g.grad_input->full_tensor(), r.gx, tol * 10, "grad_input");
    REQUIRE(g.grad_weight);
    REQUIRE(g.grad_weight->shape() == pshape);
    require_close(g.grad_weight->full_tensor(), r.gw, tol * 10, "grad_weight");
    REQUIRE(g.grad_bias);
    require_close(g.grad_bias->full_tensor(), r.gb, tol * 10, "grad_bias");
  };

  if (c.kind == Kind::Batch) {
    Placements y_placements = c.placements;
    std::optional<DTensor> rm, rv;
    std::vector<double> rmv, rvv;
    if (c.running) {
      const Tensor RM = random_tensor({c.input[1]}, dtype, c.seed + 20, 0.5, 0.0);
      const Tensor RV = random_tensor({c.input[1]}, dtype, c.seed + 21, 0.5, 1.0);
      rm.emplace(distribute_tensor(RM, mesh, rep));
      rv.emplace(distribute_tensor(RV, mesh, rep));
      rmv = values(RM);
      rvv = values(RV);
    }
    if (c.training) {
      const int steps = c.running ? 3 : 1;
      for (int k = 0; k < steps; ++k) {
        INFO("training step " << k);
        const Tensor X =
            k == 0 ? X0 : random_tensor(c.input, dtype, c.seed + 100 + k, 1.0, c.offset);
        const DTensor x = k == 0 ? x0 : distribute_tensor(X, mesh, c.placements);
        const auto xv = values(X);
        const BatchNormResult r = batch_norm(x, w, b, rm, rv, true, c.momentum, c.eps);
        const RefForward f = ref_forward(L, xv, wv, bv, c.eps);
        require_close(r.output.full_tensor(), f.y, tol, "output");
        y_placements = r.output.placements();
        REQUIRE(r.running_mean.has_value() == c.running);
        if (c.running) {
          for (std::size_t ch = 0; ch < rmv.size(); ++ch) {
            const double n = static_cast<double>(f.count[ch]);
            if (n == 0) continue;  // an empty batch leaves them alone
            rmv[ch] = (1 - c.momentum) * rmv[ch] + c.momentum * f.mean[ch];
            rvv[ch] = (1 - c.momentum) * rvv[ch] + c.momentum * f.var[ch] * n / (n - 1);
          }
          require_close(r.running_mean->full_tensor(), rmv, tol, "running_mean");
          require_close(r.running_var->full_tensor(), rvv, tol, "running_var");
          rm = r.running_mean;
          rv = r.running_var;
          // What the caller keeps is what it rounds to: the reference follows.
          rmv = values(r.running_mean->full_tensor());
          rvv = values(r.running_var->full_tensor());
        }
      }
      const DTensor gy = distribute_tensor(GY, mesh, y_placements);
      check_grads(batch_norm_backward(gy, x0, w, rm, rv, true, c.eps),
                  ref_backward(L, xv0, gyv, wv, c.eps), x0);
    }
    if (c.running) {  // eval mode with whatever the running statistics are now
      INFO("eval mode");
      const BatchNormResult r = batch_norm(x0, w, b, rm, rv, false, c.momentum, c.eps);
      require_close(r.output.full_tensor(), ref_eval_forward(L, xv0, rmv, rvv, wv, bv, c.eps), tol,
                    "eval output");
      const DTensor gy = distribute_tensor(GY, mesh, r.output.placements());
      check_grads(batch_norm_backward(gy, x0, w, rm, rv, false, c.eps),
                  ref_eval_backward(L, xv0, gyv, rmv, rvv, wv, c.eps), x0);
    }
    return;
  }

  DTensor y = c.kind == Kind::Group      ? group_norm(x0, c.groups, w, b, c.eps)
              : c.kind == Kind::Instance ? instance_norm(x0, w, b, c.eps)
                                         : layer_norm(x0, w, b, c.eps);
  require_close(y.full_tensor(), ref_forward(L, xv0, wv, bv, c.eps).y, tol, "output");
  const DTensor gy = distribute_tensor(GY, mesh, y.placements());
  const NormGrads g = c.kind == Kind::Group      ? group_norm_backward(gy, x0, c.groups, w, c.eps)
                      : c.kind == Kind::Instance ? instance_norm_backward(gy, x0, w, c.eps)
                                                 : layer_norm_backward(gy, x0, w, c.eps);
  check_grads(g, ref_backward(L, xv0, gyv, wv, c.eps), x0);
}

// ---------------------------------------------------------------------------
// Counting the communication.

struct Counts {
  std::uint64_t collectives = 0, allreduces = 0, allgathers = 0;
};

// A group that counts its collectives and makes counting subgroups, so that
// a mesh built over it counts on every one of its groups.
class CountingGroup final : public ForwardingProcessGroup {
 public:
  explicit CountingGroup(std::shared_ptr<ProcessGroup> inner)
      : ForwardingProcessGroup(std::move(inner)) {}
  const Counts& counts() const { return counts_; }

  void allreduce(Tensor& t, ReduceOp op) override {
    ++counts_.collectives;
    ++counts_.allreduces;
    inner_->allreduce(t, op);
  }
  void broadcast(Tensor& t, int root) override {
    ++counts_.collectives;
    inner_->broadcast(t, root);
  }
  void allgather(const Tensor& in, Tensor& out, const std::vector<std::int64_t>& c) override {
    ++counts_.collectives;
    ++counts_.allgathers;
    inner_->allgather(in, out, c);
  }
  void reduce_scatter(const Tensor& in, Tensor& out, const std::vector<std::int64_t>& c,
                      ReduceOp op) override {
    ++counts_.collectives;
    inner_->reduce_scatter(in, out, c, op);
  }
  void all_to_all(const Tensor& in, const std::vector<std::int64_t>& sc, Tensor& out,
                  const std::vector<std::int64_t>& rc) override {
    ++counts_.collectives;
    inner_->all_to_all(in, sc, out, rc);
  }
  void barrier() override {
    ++counts_.collectives;
    inner_->barrier();
  }
  std::shared_ptr<ProcessGroup> new_subgroup(const std::vector<int>& ranks) override {
    return std::make_shared<CountingGroup>(inner_->new_subgroup(ranks));
  }
  std::shared_ptr<ProcessGroup> split_groups(const std::vector<std::vector<int>>& groups) override {
    auto g = inner_->split_groups(groups);
    return g ? std::make_shared<CountingGroup>(g) : nullptr;
  }

 private:
  Counts counts_;
};

// Every group of the mesh (per mesh dim, and the whole mesh's), once each.
struct MeshGroups {
  std::vector<const CountingGroup*> groups;  // by mesh dim, then the mesh's group
  explicit MeshGroups(const DeviceMesh& mesh) {
    for (std::int64_t m = 0; m < mesh.ndim(); ++m)
      groups.push_back(dynamic_cast<const CountingGroup*>(mesh.get_group(m).get()));
    groups.push_back(dynamic_cast<const CountingGroup*>(mesh.get_mesh_group().get()));
    for (auto* g : groups)
      REQUIRE(g != nullptr);
  }
  struct Snapshot {
    std::vector<Counts> counts;
    std::vector<std::uint64_t> bytes;
  };
  Snapshot snap() const {
    Snapshot s;
    for (auto* g : groups) {
      s.counts.push_back(g->counts());
      // The wrapped group's counters, which a forwarding group reports.
      s.bytes.push_back(g->counters().bytes_sent + g->counters().bytes_received);
    }
    return s;
  }
};

struct CommCase {
  Kind kind;
  Shape input;
  std::int64_t groups;
  Placements placements;
  std::int64_t group_index;  // which of MeshGroups::groups communicates; -1: none
  bool training = true;
  // The reduced dims are sharded on a proper subset of the mesh dims (3-D
  // meshes): both passes all-gather over the block of those dims
  // (DeviceMesh::get_group(block)), which group_index then names.
  std::vector<std::int64_t> block{};
};

// Runs the forward and the backward of `cc` and checks who communicated.
void check_comm(const CommCase& cc, const DeviceMesh& mesh) {
  INFO(kind_name(cc.kind) << " input " << shape_str(cc.input) << " placements "
                          << placements_str(cc.placements) << " training " << cc.training);
  MeshGroups mg(mesh);
  if (!cc.block.empty()) {
    mg.groups.push_back(dynamic_cast<const CountingGroup*>(mesh.get_group(cc.block).get()));
    REQUIRE(mg.groups.back() != nullptr);
  }
  const Placements rep(static_cast<std::size_t>(mesh.ndim()), Replicate());
  const Tensor X = Tensor::rand(cc.input, DType::F64, 5);
  const DTensor x = distribute_tensor(X, mesh, cc.placements);
  const DTensor gy = distribute_tensor(Tensor::rand(cc.input, DType::F64, 6), mesh, cc.placements);
  const Shape pshape =
      cc.kind == Kind::Layer ? Shape(cc.input.begin() + 1, cc.input.end()) : Shape{cc.input[1]};
  // The parameters placed as the strategy wants them (sharded like the
  // input's dims 1..), so that nothing is redistributed: a redistribution,
  // even a local slice, runs an agreement check on the mesh's group.
  Placements wp = rep;
  for (std::size_t m = 0; m < wp.size(); ++m) {
    const Placement& p = cc.placements[m];
    if (cc.kind == Kind::Layer && p.is_shard() && p.dim() >= 1) wp[m] = Shard(p.dim() - 1);
    if (cc.kind != Kind::Layer && p.is_shard(1)) wp[m] = Shard(0);
  }
  const DTensor w = distribute_tensor(Tensor::rand(pshape, DType::F64, 7), mesh, wp);
  const Placements rp = cc.kind == Kind::Batch ? wp : rep;
  const DTensor rm = distribute_tensor(Tensor::zeros({cc.input[1]}, DType::F64), mesh, rp);
  const DTensor rv = distribute_tensor(Tensor::full({cc.input[1]}, 1.0, DType::F64), mesh, rp);

  auto expect = [&](const MeshGroups::Snapshot& before, std::uint64_t allgathers,
                    std::uint64_t allreduces, const char* pass) {
    INFO(pass);
    const auto after = mg.snap();
    for (std::size_t k = 0; k < mg.groups.size(); ++k) {
      INFO("group " << k << " (mesh dims, then the mesh's)");
      const Counts& a = after.counts[k];
      const Counts& b = before.counts[k];
      const bool mine = static_cast<std::int64_t>(k) == cc.group_index ||
                        (cc.group_index >= 0 && mg.groups[k] == mg.groups[cc.group_index]);
      if (mine) {
        CHECK(a.collectives - b.collectives == allgathers + allreduces);
        CHECK(a.allgathers - b.allgathers == allgathers);
        CHECK(a.allreduces - b.allreduces == allreduces);
      } else {
        CHECK(a.collectives == b.collectives);
        if (cc.group_index < 0) CHECK(after.bytes[k] == before.bytes[k]);
      }
    }
  };

  auto s0 = mg.snap();
  if (cc.kind == Kind::Batch) {
    (void)batch_norm(x, w, w, rm, rv, cc.training, 0.1, 1e-5);
  } else if (cc.kind == Kind::Group) {
    (void)group_norm(x, cc.groups, w, w, 1e-5);
  } else if (cc.kind == Kind::Instance) {
    (void)instance_norm(x, w, w, 1e-5);
  } else {
    (void)layer_norm(x, w, w, 1e-5);
  }
  const bool stats = cc.kind != Kind::Batch || cc.training;
  expect(s0, stats ? 1 : 0, 0, "forward");
  auto s1 = mg.snap();
  if (cc.kind == Kind::Batch) {
    (void)batch_norm_backward(gy, x, w, rm, rv, cc.training, 1e-5);
  } else if (cc.kind == Kind::Group) {
    (void)group_norm_backward(gy, x, cc.groups, w, 1e-5);
  } else if (cc.kind == Kind::Instance) {
    (void)instance_norm_backward(gy, x, w, 1e-5);
  } else {
    (void)layer_norm_backward(gy, x, w, 1e-5);
  }
  // The backward: the statistics again and the two gradient sums, together
  // in one collective.
  expect(s1, stats ? 1 : 0, 0, "backward");
}

struct Batch {
  Kind kind;
  Shape mesh;
  DType dtype;
  int configs;
};

std::string mesh_str(const Shape& mesh) {
  std::string s;
  for (std::size_t k = 0; k < mesh.size(); ++k)
    s += (k ? "x" : "") + std::to_string(mesh[k]);
  return s;
}

DTENSOR_TEST_REGISTRAR {
  // >= 100 configurations per operator in the default run.
  std::vector<Batch> batches;
  for (Kind k : {Kind::Batch, Kind::Group, Kind::Instance, Kind::Layer}) {
    batches.push_back({k, {2}, DType::F64, 30});
    batches.push_back({k, {3}, DType::F64, 25});
    batches.push_back({k, {4}, DType::F64, 20});
    batches.push_back({k, {2, 2}, DType::F64, 25});
    batches.push_back({k, {2}, DType::F32, 10});
    batches.push_back({k, {2, 2}, DType::F32, 5});
    batches.push_back({k, {2, 2, 2}, DType::F64, 5});
  }
  for (const auto& b : batches) {
    const std::string name =
        fmt::format("norm differential {} {} mesh {} ({} configs)", kind_name(b.kind),
                    dtype_name(b.dtype), mesh_str(b.mesh), b.configs);
    register_test(name, "[norm][differential][mp]", [=] {
      RunOptions o;
      o.deadline = std::chrono::seconds(240);
      run_ranks(
          static_cast<int>(shape_numel(b.mesh)),
          [=](RankContext&) {
            Rng rng(std::hash<std::string>()(name));
            for (int k = 0; k < b.configs; ++k)
              check_case(random_case(rng, b.kind, b.mesh), b.mesh, b.dtype);
          },
          o);
    });
  }

  // Group counts that split a channel shard (the propagator then moves the
  // channels) and ones that do not: C = 6 sharded 3,3 (P=2), 2,2,2 (P=3),
  // 2,2,2,0 (P=4), in groups of 6, 3, 2 and 1 channels.
  register_test("norm group_norm channel shards that split groups", "[norm][edge][mp]", [] {
    for (int P : {2, 3, 4})
      run_ranks(P, [P](RankContext&) {
        for (std::int64_t groups : {1, 2, 3, 6})
          for (bool affine : {false, true}) {
            Case c;
            c.kind = Kind::Group;
            c.input = {2, 6, 5};
            c.groups = groups;
            c.affine = affine;
            c.placements = {Shard(1)};
            c.seed = static_cast<std::uint64_t>(groups * 10 + P);
            check_case(c, {P}, DType::F64);
          }
      });
  });

  // Who communicates, and how often.
  register_test(
      "norm one collective per pass and none when no reduced dim is sharded", "[norm][comm][mp]",
      [] {
        RunOptions o;
        o.env["DTENSOR_CHECK_AGREEMENT"] = "0";  // the agreement check's bytes would count too
        o.deadline = std::chrono::seconds(120);
        run_ranks(
            4,
            [](RankContext& ctx) {
              const auto world = std::make_shared<CountingGroup>(ctx.pg);
              // Group indices: 0, 1 the mesh dims, 2 the mesh's (for 2x2 the world itself).
              const DeviceMesh m22(DeviceType::CPU, {2, 2}, {0, 1, 2, 3}, world);
              const std::vector<CommCase> cases22 = {
                  // reduced dims sharded on one mesh dim: that dim's group only
                  {Kind::Batch, {4, 3, 6}, 1, {Shard(0), Replicate()}, 0},
                  {Kind::Batch, {4, 3, 6}, 1, {Shard(1), Shard(2)}, 1},
                  {Kind::Group, {2, 4, 6}, 2, {Shard(1), Shard(2)}, 1},
                  {Kind::Instance, {2, 3, 6, 5}, 1, {Shard(3), Shard(0)}, 0},
                  {Kind::Layer, {2, 3, 6}, 1, {Replicate(), Shard(1)}, 1},
                  // on both mesh dims: the mesh's group, once
                  {Kind::Batch, {4, 3, 6}, 1, {Shard(0), Shard(2)}, 2},
                  {Kind::Instance, {2, 3, 6, 5}, 1, {Shard(2), Shard(3)}, 2},
                  {Kind::Layer, {2, 4, 6}, 1, {Shard(1), Shard(2)}, 2},
                  {Kind::Group, {2, 4, 6, 4}, 2, {Shard(3), Shard(2)}, 2},
                  // no reduced dim sharded: not a byte anywhere
                  {Kind::Group, {4, 4, 6}, 2, {Shard(0), Shard(1)}, -1},
                  {Kind::Instance, {4, 3, 6}, 1, {Shard(1), Shard(0)}, -1},
                  {Kind::Batch, {4, 4, 6}, 1, {Shard(1), Replicate()}, -1},
                  {Kind::Layer, {4, 3, 6}, 1, {Shard(0), Replicate()}, -1},
                  {Kind::Layer, {4, 3, 6}, 1, {Replicate(), Replicate()}, -1},
                  // eval mode: the running statistics, no communication at all
                  {Kind::Batch, {4, 3, 6}, 1, {Shard(0), Shard(2)}, -1, false},
              };
              for (const auto& cc : cases22)
                check_comm(cc, m22);
              // 1-D over 4 ranks: its one group.
              const DeviceMesh m4(DeviceType::CPU, {4}, {0, 1, 2, 3}, world);
              check_comm({Kind::Batch, {3, 2, 7}, 1, {Shard(2)}, 0}, m4);
              check_comm({Kind::Group, {3, 6, 7}, 3, {Shard(1)}, -1}, m4);    // 2,2,2,0: aligned
              check_comm({Kind::Instance, {3, 2, 3}, 1, {Shard(2)}, 0}, m4);  // an empty shard
            },
            o);
      });

  // The same on a 2x2x2 mesh, where a proper subset of the mesh dims
  // (a block no mesh dim has) shards the reduced dims: only that block talks.
  register_test("norm one collective per pass on a 2x2x2 mesh", "[norm][comm][mp]", [] {
    RunOptions o;
    o.env["DTENSOR_CHECK_AGREEMENT"] = "0";
    o.deadline = std::chrono::seconds(120);
    run_ranks(
        8,
        [](RankContext& ctx) {
          const auto world = std::make_shared<CountingGroup>(ctx.pg);
          const DeviceMesh m(DeviceType::CPU, {2, 2, 2}, {0, 1, 2, 3, 4, 5, 6, 7}, world);
          // Group indices 0..2 the mesh dims, 3 the mesh's, 4 the case's block.
          check_comm({Kind::Batch, {4, 2, 6}, 1, {Shard(0), Shard(1), Shard(2)}, 4, true, {0, 2}},
                     m);
          check_comm({Kind::Instance, {4, 2, 6}, 1, {Shard(2), Shard(1), Shard(0)}, 0}, m);
          check_comm({Kind::Group, {4, 4, 6}, 2, {Shard(0), Shard(1), Replicate()}, -1}, m);
          check_comm(
              {Kind::Batch, {4, 2, 6, 4}, 1, {Shard(2), Shard(1), Shard(3)}, 4, true, {0, 2}}, m);
          check_comm({Kind::Batch, {4, 2, 6, 4}, 1, {Shard(3), Shard(0), Shard(2)}, 3}, m);
          Rng rng(17);
          for (Kind k : {Kind::Batch, Kind::Group, Kind::Instance, Kind::Layer})
            for (int i = 0; i < 3; ++i)
              check_case(random_case(rng, k, {2, 2, 2}), {2, 2, 2}, DType::F64);
        },
        o);
  });
}

}  // namespace
