// The shape operators (reshape, flatten, permute, transpose, narrow) on 1, 2
// and 3 ranks and a 2x2 mesh: values and gradients against index loops over
// the global tensors, and the output placements against the view rules
// worked out by hand (a sharded dim kept where the shards line up, else
// replicated), including uneven shards and the sharded dim being the one
// reshaped, permuted or narrowed.
#include <catch2/catch.hpp>

#include <functional>
#include <numeric>

#include "dtensor/core/device_mesh.h"
#include "dtensor/ops/autograd.h"
#include "dtensor/ops/pointwise.h"
#include "dtensor/ops/views.h"
#include "tests/support/multiprocess.h"

using namespace dtensor;
using dtensor::testing::RankContext;
using dtensor::testing::run_ranks;

namespace {

using Int = std::int64_t;
using Index = std::vector<Int>;

Index unravel(Int flat, const Shape& shape) {
  Index idx(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    idx[d] = flat % shape[d];
    flat /= shape[d];
  }
  return idx;
}

Int ravel(const Index& idx, const Shape& shape) {
  Int flat = 0;
  for (std::size_t d = 0; d < shape.size(); ++d)
    flat = flat * shape[d] + idx[d];
  return flat;
}

// The oracle of a view: the output's shape and, per output element (flat),
// the input element (flat) it is.
struct ViewOracle {
  Shape shape;
  std::function<Int(Int)> source;
};

ViewOracle reshape_oracle(const Shape& out) {
  return {out, [](Int i) { return i; }};
}

ViewOracle permute_oracle(const Shape& in, const Index& order) {
  Shape out;
  for (Int d : order)
    out.push_back(in[static_cast<std::size_t>(d)]);
  return {out, [in, out, order](Int i) {
            const Index o = unravel(i, out);
            Index j(in.size());
            for (std::size_t k = 0; k < order.size(); ++k)
              j[static_cast<std::size_t>(order[k])] = o[k];
            return ravel(j, in);
          }};
}

ViewOracle narrow_oracle(const Shape& in, Int dim, Int start, Int length) {
  Shape out = in;
  out[static_cast<std::size_t>(dim)] = length;
  return {out, [in, out, dim, start](Int i) {
            Index j = unravel(i, out);
            j[static_cast<std::size_t>(dim)] += start;
            return ravel(j, in);
          }};
}

Placements without_partial(Placements p) {
  for (auto& q : p)
    if (q.is_partial()) q = Replicate();
  return p;
}

// op(x) for x of shape `in` placed `p`: its values, placements and the input's
// gradient (through sum(op(x) * G)) against the oracle.
void check_view(const DeviceMesh& mesh, const Shape& in, const Placements& p,
                const std::function<DTensor(const DTensor&)>& op, const ViewOracle& oracle,
                const Placements& expected, const std::string& what) {
  INFO(what << " on input " << shape_str(in) << " placed " << placements_str(p));
  const Tensor X = Tensor::rand(in, DType::F64, 11);
  DTensor x = distribute_tensor(X, mesh, p);
  x.requires_grad_();
  const DTensor y = op(x);
  REQUIRE(y.shape() == oracle.shape);
  CHECK(y.placements() == expected);
  const Tensor Y = y.full_tensor();
  const Tensor G = Tensor::rand(oracle.shape, DType::F64, 12);
  Tensor gx = Tensor::zeros(in, DType::F64);
  double err = 0;
  for (Int i = 0; i < shape_numel(oracle.shape); ++i) {
    const Int j = oracle.source(i);
    err = std::max(err, std::abs(Y.item_flat(i) - X.item_flat(j)));
    gx.data<double>()[j] += G.item_flat(i);
  }
  CHECK(err == 0);
  backward(sum(mul(y, distribute_tensor(G, mesh, without_partial(y.placements())))));
  REQUIRE(x.grad().has_value());
  CHECK(x.grad()->spec() == x.spec());
  CHECK(max_abs_diff(x.grad()->full_tensor(), gx) == 0);
}

void check_reshape(const DeviceMesh& mesh, const Shape& in, const Placements& p, const Shape& shape,
                   const Shape& resolved, const Placements& expected) {
  check_view(
      mesh, in, p, [&](const DTensor& x) { return reshape(x, shape); }, reshape_oracle(resolved),
      expected, "reshape to " + shape_str(shape));
}

void check_flatten(const DeviceMesh& mesh, const Shape& in, const Placements& p, Int start, Int end,
                   const Shape& resolved, const Placements& expected) {
  check_view(
      mesh, in, p, [&](const DTensor& x) { return flatten(x, start, end); },
      reshape_oracle(resolved), expected, fmt::format("flatten({}, {})", start, end));
}

void check_permute(const DeviceMesh& mesh, const Shape& in, const Placements& p, const Index& order,
                   const Index& resolved, const Placements& expected) {
  check_view(
      mesh, in, p, [&](const DTensor& x) { return permute(x, order); },
      permute_oracle(in, resolved), expected, "permute to " + shape_str(order));
}

void check_transpose(const DeviceMesh& mesh, const Shape& in, const Placements& p, Int a, Int b,
                     const Placements& expected) {
  Index order(in.size());
  std::iota(order.begin(), order.end(), Int{0});
  const auto n = static_cast<Int>(in.size());
  std::swap(order[static_cast<std::size_t>((a + n) % n)],
            order[static_cast<std::size_t>((b + n) % n)]);
  check_view(
      mesh, in, p, [&](const DTensor& x) { return transpose(x, a, b); }, permute_oracle(in, order),
      expected, fmt::format("transpose({}, {})", a, b));
}

void check_narrow(const DeviceMesh& mesh, const Shape& in, const Placements& p, Int dim, Int start,
                  Int length, const Placements& expected) {
  const auto n = static_cast<Int>(in.size());
  const Int d = (dim + n) % n;
  const Int size = in[static_cast<std::size_t>(d)];
  check_view(
      mesh, in, p, [&](const DTensor& x) { return narrow(x, dim, start, length); },
      narrow_oracle(in, d, start < 0 ? start + size : start, length), expected,
      fmt::format("narrow({}, {}, {})", dim, start, length));
}

const Placements R1{Replicate()};
Placements S1(Int d) {
  return {Shard(d)};
}

}  // namespace

TEST_CASE("shape operators on one rank", "[ops][views]") {
  run_ranks(1, [](RankContext&) {
    const DeviceMesh mesh(DeviceType::CPU, {1});
    check_reshape(mesh, {4, 3, 5}, R1, {-1, 5}, {12, 5}, R1);
    check_reshape(mesh, {4, 3, 5}, S1(1), {5, 3, 4}, {5, 3, 4}, R1);  // 3 is not the group's first
    check_reshape(mesh, {4, 3, 5}, S1(0), {2, 2, 15}, {2, 2, 15}, S1(0));
    check_reshape(mesh, {1, 1}, R1, {}, {}, R1);
    check_flatten(mesh, {2, 3, 4}, R1, 0, -1, {24}, R1);
    check_permute(mesh, {2, 3, 4}, S1(2), {-1, 0, 1}, {2, 0, 1}, S1(0));
    check_transpose(mesh, {2, 3, 4}, R1, 0, -1, R1);
    check_narrow(mesh, {5, 6}, S1(1), 1, -4, 3, R1);
    check_narrow(mesh, {5, 6}, R1, 0, 5, 0, R1);
  });
}

TEST_CASE("shape operators on 2 ranks: shards kept where they line up, else replicated",
          "[ops][views][mp]") {
  run_ranks(2, [](RankContext&) {
    const DeviceMesh mesh(DeviceType::CPU, {2});
    // Merges: 4 rows of 3 over 2 ranks are 6 + 6 elements, the chunks of 12.
    check_reshape(mesh, {4, 3, 5}, S1(0), {12, 5}, {12, 5}, S1(0));
    check_flatten(mesh, {4, 3, 5}, S1(0), 0, -1, {60}, S1(0));
    check_reshape(mesh, {4, 3, 5}, S1(0), {4, 15}, {4, 15}, S1(0));
    check_reshape(mesh, {4, 3, 5}, S1(2), {-1, 5}, {12, 5}, S1(1));
    // Uneven: 3 rows of 2 over 2 ranks are 4 + 2 elements, the chunks of 6
    // are 3 + 3: replicated first.
    check_reshape(mesh, {3, 2, 5}, S1(0), {6, 5}, {6, 5}, R1);
    // Not the outermost dim of its merge.
    check_reshape(mesh, {4, 3, 5}, S1(1), {12, 5}, {12, 5}, R1);
    check_flatten(mesh, {4, 3, 5}, S1(2), 1, 2, {4, 15}, R1);
    check_flatten(mesh, {2, 3, 4, 5}, S1(1), 1, 2, {2, 12, 5}, R1);  // 8 + 4 against 6 + 6
    check_flatten(mesh, {2, 4, 3, 5}, S1(1), 1, 2, {2, 12, 5}, S1(1));
    check_flatten(mesh, {2, 4, 3, 5}, S1(3), 1, 2, {2, 12, 5}, S1(2));
    // Splits: 12 over 2 is 6 + 6, and 4 over 2 (times 3) too.
    check_reshape(mesh, {12, 5}, S1(0), {4, 3, 5}, {4, 3, 5}, S1(0));
    check_reshape(mesh, {6, 5}, S1(0), {3, 2, 5}, {3, 2, 5}, R1);  // 3 + 3 against 4 + 2
    check_reshape(mesh, {5, 4}, S1(1), {5, 2, 2}, {5, 2, 2}, S1(1));
    check_reshape(mesh, {5, 4}, S1(1), {5, 1, 4}, {5, 1, 4}, S1(2));
    check_reshape(mesh, {1, 6}, S1(1), {6}, {6}, S1(0));
    check_reshape(mesh, {5, 3}, S1(0), {15}, {15}, R1);  // 9 + 6 against 8 + 7
    // Permutes move the shard with its dim.
    check_permute(mesh, {2, 3, 5}, S1(1), {2, 0, 1}, {2, 0, 1}, S1(2));
    check_permute(mesh, {2, 3, 5}, S1(2), {2, 1, 0}, {2, 1, 0}, S1(0));
    check_transpose(mesh, {3, 5}, S1(0), 0, -1, S1(1));
    check_transpose(mesh, {3, 4, 5}, S1(2), 1, 0, S1(2));
    // Narrow: along the sharded dim it is replicated first, elsewhere kept.
    check_narrow(mesh, {5, 6}, S1(0), 0, 1, 3, R1);
    check_narrow(mesh, {5, 6}, S1(0), 1, 2, 4, S1(0));
    check_narrow(mesh, {5, 7}, S1(1), -1, -5, 5, R1);
    check_narrow(mesh, {5, 7}, R1, 1, 0, 7, R1);
  });
}

TEST_CASE("reshape on 3 ranks: uneven chunks that do and do not line up", "[ops][views][mp]") {
  run_ranks(3, [](RankContext&) {
    const DeviceMesh mesh(DeviceType::CPU, {3});
    check_reshape(mesh, {9, 2}, S1(0), {3, 3, 2}, {3, 3, 2}, S1(0));  // 6 + 6 + 6
    check_reshape(mesh, {8, 2}, S1(0), {4, 2, 2}, {4, 2, 2}, R1);     // 6 + 6 + 4 vs 8 + 8 + 0
    check_reshape(mesh, {4, 2, 3}, S1(0), {24}, {24}, R1);            // 12 + 12 + 0 vs 8 + 8 + 8
    check_reshape(mesh, {7, 4}, S1(1), {7, 2, 2}, {7, 2, 2}, S1(1));  // 2 + 2 + 0 both ways
    check_permute(mesh, {7, 4}, S1(0), {1, 0}, {1, 0}, S1(1));
    check_narrow(mesh, {7, 4}, S1(0), 1, 1, 2, S1(0));
  });
}

TEST_CASE("shape operators on a 2x2 mesh", "[ops][views][mp]") {
  run_ranks(4, [](RankContext&) {
    const DeviceMesh mesh(DeviceType::CPU, {2, 2});
    // The second sharded dim of one merge is replicated; the first is kept.
    check_reshape(mesh, {4, 6, 5}, {Shard(0), Shard(1)}, {24, 5}, {24, 5}, {Shard(0), Replicate()});
    // A dim sharded on both mesh dims (nested chunks) lines up: 8 -> 4,4 ->
    // 2,2,2,2 rows of 3, the nested chunks of 24.
    check_reshape(mesh, {8, 3}, {Shard(0), Shard(0)}, {24}, {24}, {Shard(0), Shard(0)});
    check_reshape(mesh, {5, 3}, {Shard(0), Replicate()}, {15}, {15}, {Replicate(), Replicate()});
    check_reshape(mesh, {4, 6}, {Shard(1), Shard(0)}, {2, 2, 2, 3}, {2, 2, 2, 3},
                  {Shard(2), Shard(0)});
    check_flatten(mesh, {2, 4, 3, 5}, {Shard(3), Shard(1)}, 1, 2, {2, 12, 5}, {Shard(2), Shard(1)});
    check_permute(mesh, {3, 4, 5}, {Shard(2), Shard(0)}, {1, 2, 0}, {1, 2, 0},
                  {Shard(1), Shard(2)});
    check_transpose(mesh, {3, 5}, {Shard(1), Shard(0)}, 0, 1, {Shard(0), Shard(1)});
    check_narrow(mesh, {5, 6}, {Shard(0), Shard(1)}, 1, 1, 4, {Shard(0), Replicate()});
    check_narrow(mesh, {5, 6}, {Shard(1), Shard(1)}, 1, 0, 5, {Replicate(), Replicate()});
  });
}

TEST_CASE("Partial inputs stay Partial through every shape operator", "[ops][views][mp]") {
  run_ranks(2, [](RankContext& ctx) {
    const DeviceMesh mesh(DeviceType::CPU, {2});
    const Shape s{3, 4};
    const Tensor A = Tensor::rand(s, DType::F64, 3);
    // Rank 0 holds A - 1 and rank 1 holds 1: the pending sum is A.
    Tensor part = Tensor::full(s, 1.0, DType::F64);
    if (ctx.rank == 0) part = A.clone().add_(Tensor::full(s, -1.0, DType::F64));
    const auto p = DTensor::from_local(part, mesh, {Partial()}, s);
    const Placements partial{Partial()};
    const auto expect = [&](const DTensor& y, const ViewOracle& o) {
      CHECK(y.placements() == partial);
      REQUIRE(y.shape() == o.shape);
      const Tensor Y = y.full_tensor();
      double err = 0;
      for (Int i = 0; i < shape_numel(o.shape); ++i)
        err = std::max(err, std::abs(Y.item_flat(i) - A.item_flat(o.source(i))));
      CHECK(err < 1e-15);
    };
    expect(reshape(p, {2, 6}), reshape_oracle({2, 6}));
    expect(flatten(p), reshape_oracle({12}));
    expect(permute(p, {1, 0}), permute_oracle(s, {1, 0}));
    expect(transpose(p, 1, 0), permute_oracle(s, {1, 0}));
    expect(narrow(p, 1, 1, 2), narrow_oracle(s, 1, 1, 2));
    // narrow_backward of a Partial gradient: zeros around it on every rank.
    const DTensor g = narrow_backward(p, {3, 7}, 1, 2);
    CHECK(g.placements() == partial);
    const Tensor Gf = g.full_tensor();
    double err = 0;
    for (Int i = 0; i < 3; ++i)
      for (Int j = 0; j < 7; ++j)
        err =
            std::max(err, std::abs(Gf.item({i, j}) - (j >= 2 && j < 6 ? A.item({i, j - 2}) : 0.0)));
    CHECK(err < 1e-15);
  });
}

TEST_CASE(
    "permute moves f32, bf16 and f16 elements unchanged, large tensors take the threaded "
    "path",
    "[ops][views][mp]") {
  run_ranks(2, [](RankContext&) {
    const DeviceMesh mesh(DeviceType::CPU, {2});
    for (DType dt : {DType::F32, DType::BF16, DType::F16}) {
      INFO(dtype_name(dt));
      const Shape in{3, 4, 5};
      const Tensor X = Tensor::rand(in, dt, 5);
      const auto y = permute(distribute_tensor(X, mesh, {Shard(1)}), {2, 0, 1});
      REQUIRE(y.dtype() == dt);
      const auto o = permute_oracle(in, {2, 0, 1});
      const Tensor Y = y.full_tensor();
      double err = 0;
      for (Int i = 0; i < X.numel(); ++i)
        err = std::max(err, std::abs(Y.item_flat(i) - X.item_flat(o.source(i))));
      CHECK(err == 0);
    }
    const Shape big{40, 64, 30};  // 38400 elements per rank: above the kernel's serial size
    const Tensor X = Tensor::rand(big, DType::F64, 6);
    for (const Index& order : {Index{2, 1, 0}, Index{1, 0, 2}, Index{0, 2, 1}}) {
      const auto y = permute(distribute_tensor(X, mesh, {Replicate()}), order);
      const auto o = permute_oracle(big, order);
      const Tensor Y = y.full_tensor();
      double err = 0;
      for (Int i = 0; i < X.numel(); ++i)
        err = std::max(err, std::abs(Y.item_flat(i) - X.item_flat(o.source(i))));
      CHECK(err == 0);
    }
  });
}

TEST_CASE("reshape of a contiguous local tensor is a view, permute and narrow copy",
          "[ops][views]") {
  run_ranks(1, [](RankContext&) {
    const DeviceMesh mesh(DeviceType::CPU, {1});
    const auto x = distribute_tensor(Tensor::rand({4, 6}, DType::F32, 1), mesh, {Replicate()});
    CHECK(reshape(x, {3, 8}).to_local().shares_storage_with(x.to_local()));
    CHECK(flatten(x).to_local().shares_storage_with(x.to_local()));
    CHECK(!permute(x, {1, 0}).to_local().shares_storage_with(x.to_local()));
    CHECK(!narrow(x, 0, 1, 2).to_local().shares_storage_with(x.to_local()));
  });
}

TEST_CASE("shape operators refuse bad arguments on every rank, naming the parameter",
          "[ops][views][mp]") {
  run_ranks(2, [](RankContext&) {
    const DeviceMesh mesh(DeviceType::CPU, {2});
    const auto x = distribute_tensor(Tensor::rand({4, 6}, DType::F64, 1), mesh, {Shard(0)});
    using Catch::Contains;
    CHECK_THROWS_AS(reshape(x, {5, 5}), InvalidArgument);
    CHECK_THROWS_WITH(reshape(x, {5, 5}), Contains("shape:"));
    CHECK_THROWS_WITH(reshape(x, {-1, -1}), Contains("shape: only one dim can be -1"));
    CHECK_THROWS_WITH(reshape(x, {-1, 5}), Contains("shape:"));
    CHECK_THROWS_WITH(reshape(x, {-2, 12}), Contains("shape:"));
    CHECK_THROWS_WITH(reshape(x, {-1, 0}), Contains("shape:"));
    CHECK_THROWS_WITH(permute(x, {0}), Contains("order:"));
    CHECK_THROWS_WITH(permute(x, {0, 0}), Contains("order: dim 0 is repeated"));
    CHECK_THROWS_WITH(permute(x, {0, 2}), Contains("order:"));
    CHECK_THROWS_WITH(transpose(x, 0, 2), Contains("dim1:"));
    CHECK_THROWS_WITH(transpose(x, -3, 1), Contains("dim0:"));
    CHECK_THROWS_WITH(flatten(x, 1, 0), Contains("start_dim:"));
    CHECK_THROWS_WITH(flatten(x, 2, -1), Contains("start_dim:"));
    CHECK_THROWS_WITH(flatten(x, 0, 2), Contains("end_dim:"));
    CHECK_THROWS_WITH(narrow(x, 2, 0, 1), Contains("dim:"));
    CHECK_THROWS_WITH(narrow(x, 1, 7, 0), Contains("start:"));
    CHECK_THROWS_WITH(narrow(x, 1, -7, 1), Contains("start:"));
    CHECK_THROWS_WITH(narrow(x, 1, 2, 5), Contains("length:"));
    CHECK_THROWS_WITH(narrow(x, 1, 2, -1), Contains("length:"));
    // The ranks are still in step: a good call after the refusals works.
    CHECK(reshape(x, {-1}).shape() == Shape{24});
  });
}
