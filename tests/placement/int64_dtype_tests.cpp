// The i64 dtype: its name, size and parsing; creation, copies, conversions
// and item() on local tensors; the refusal of floating arithmetic; and
// DTensors of it moved exactly (values beyond 2^53, which no float path
// keeps) by distribute_tensor, from_local, full_tensor and every
// Shard/Replicate redistribution on 1-4 ranks and a 2x2 mesh, uneven and
// empty shards, against slices cut here (torch.chunk by enumeration).
#include <fmt/format.h>
#include <catch2/catch.hpp>

#include <cstring>

#include "dtensor/core/device_mesh.h"
#include "dtensor/core/errors.h"
#include "dtensor/placement/dtensor.h"
#include "tests/placement/redistribute_oracle.h"
#include "tests/support/multiprocess.h"
#include "tests/support/registration.h"

using namespace dtensor;
using dtensor::testing::oracle_chunk;
using dtensor::testing::RankContext;
using dtensor::testing::register_test;
using dtensor::testing::run_ranks;

namespace {

// Element i is a 64-bit pattern of i: most need all 64 bits.
Tensor wide_integers(const Shape& shape) {
  Tensor t = Tensor::empty(shape, DType::I64);
  auto* p = t.data<std::int64_t>();
  for (std::int64_t i = 0; i < t.numel(); ++i)
    p[i] = static_cast<std::int64_t>(static_cast<std::uint64_t>(i + 1) * 0x9E3779B97F4A7C15ull);
  return t;
}

// Exactly equal, element by element, as integers.
bool same_integers(const Tensor& a, const Tensor& b) {
  if (a.dtype() != DType::I64 || b.dtype() != DType::I64 || a.shape() != b.shape()) return false;
  const Tensor x = a.contiguous(), y = b.contiguous();
  return x.numel() == 0 ||
         std::memcmp(x.data_ptr(), y.data_ptr(), static_cast<std::size_t>(x.nbytes())) == 0;
}

// The part of G the rank at `coord` holds for Shard/Replicate placements.
Tensor expected_local(const Tensor& G, const Shape& mesh_shape, const Placements& placements,
                      const std::vector<std::int64_t>& coord) {
  std::vector<std::int64_t> len = G.shape(), off(G.shape().size(), 0);
  for (std::size_t i = 0; i < placements.size(); ++i) {
    if (!placements[i].is_shard()) continue;
    const auto d = static_cast<std::size_t>(placements[i].dim());
    auto [o, l] = oracle_chunk(len[d], mesh_shape[i], coord[i]);
    off[d] += o;
    len[d] = l;
  }
  Tensor v = G;
  for (std::size_t d = 0; d < len.size(); ++d)
    v = v.narrow(static_cast<std::int64_t>(d), off[d], len[d]);
  return v.contiguous();
}

std::vector<Placements> placements_of(const Shape& mesh_shape) {
  const std::vector<Placement> one = {Shard(0), Shard(1), Replicate()};
  std::vector<Placements> out;
  if (mesh_shape.size() == 1) {
    for (const auto& p : one)
      out.push_back({p});
  } else {
    for (const auto& p : one)
      for (const auto& q : one)
        out.push_back({p, q});
  }
  return out;
}

void check_moves(const Shape& mesh_shape, const Shape& shape) {
  DeviceMesh mesh(DeviceType::CPU, mesh_shape);
  const Tensor G = wide_integers(shape);
  const auto coord = *mesh.get_coordinate();
  for (const Placements& src : placements_of(mesh_shape)) {
    INFO("from " << placements_str(src) << " shape " << shape_str(shape));
    const DTensor d = distribute_tensor(G, mesh, src);
    CHECK(d.dtype() == DType::I64);
    REQUIRE(same_integers(d.to_local(), expected_local(G, mesh_shape, src, coord)));
    const DTensor x =
        DTensor::from_local(expected_local(G, mesh_shape, src, coord), mesh, src, shape);
    REQUIRE(same_integers(x.full_tensor(), G));
    for (const Placements& dst : placements_of(mesh_shape)) {
      INFO("to " << placements_str(dst));
      const DTensor y = x.redistribute(mesh, dst);
      REQUIRE(y.placements() == dst);
      REQUIRE(same_integers(y.to_local(), expected_local(G, mesh_shape, dst, coord)));
      REQUIRE(same_integers(y.redistribute(mesh, src).to_local(), x.to_local()));
    }
  }
}

DTENSOR_TEST_REGISTRAR {
  register_test("dtype i64: names, sizes, copies, conversions, refusals", "[dtype]", [] {
    CHECK(dtype_name(DType::I64) == "i64");
    CHECK(dtype_size(DType::I64) == 8);
    CHECK(parse_dtype("i64") == DType::I64);
    CHECK(parse_dtype("int64") == DType::I64);
    CHECK(dtype_of<std::int64_t>::value == DType::I64);
    CHECK(!is_floating(DType::I64));
    CHECK(is_floating(DType::BF16));
    CHECK_THROWS_AS(require_floating(DType::I64, "weight"), InvalidArgument);
    CHECK_THROWS_WITH(require_floating(DType::I64, "weight"), Catch::Contains("weight: i64"));
    CHECK_NOTHROW(require_floating(DType::F16, "weight"));

    const Tensor w = wide_integers({3, 4});
    CHECK(same_integers(w.clone(), w));
    // A strided view copied: row r of the copy is w's columns 1..2 of row r.
    const Tensor cols = w.narrow(1, 1, 2).clone();
    for (std::int64_t r = 0; r < 3; ++r)
      for (std::int64_t c = 0; c < 2; ++c)
        CHECK(cols.data<std::int64_t>()[r * 2 + c] == w.data<std::int64_t>()[r * 4 + 1 + c]);
    Tensor f = Tensor::full({2, 3}, -7, DType::I64);
    CHECK(f.item({1, 2}) == -7.0);
    f.zero_();
    CHECK(f.item_flat(5) == 0.0);
    // Conversions: integers to floats and back (floats truncate toward zero).
    Tensor d = Tensor::empty({4}, DType::F64);
    const double values[] = {2.0, -3.0, 2.9, -2.9};
    std::memcpy(d.data_ptr(), values, sizeof values);
    const Tensor i64 = d.to(DType::I64);
    CHECK(i64.data<std::int64_t>()[0] == 2);
    CHECK(i64.data<std::int64_t>()[1] == -3);
    CHECK(i64.data<std::int64_t>()[2] == 2);
    CHECK(i64.data<std::int64_t>()[3] == -2);
    CHECK(i64.to(DType::F32).item_flat(1) == -3.0);
    CHECK(max_abs_diff(i64, i64) == 0.0);
    // No floating arithmetic on integers: refused by name, never computed.
    CHECK_THROWS_WITH(Tensor::rand({2}, DType::I64, 1), Catch::Contains("rand: dtype"));
    Tensor acc = Tensor::zeros({3, 4}, DType::I64);
    CHECK_THROWS_AS(acc.add_(w), InvalidArgument);
    CHECK_THROWS_WITH(visit_dtype(DType::I64, [](auto) { return 0; }),
                      Catch::Contains("i64 tensors hold integers"));
    CHECK(visit_any_dtype(DType::I64, [](auto z) { return sizeof(z); }) == 8);
  });

  struct Layout {
    Shape mesh, shape;
  };
  for (const Layout& l : {Layout{{1}, {7, 5}}, Layout{{2}, {7, 5}}, Layout{{3}, {7, 5}},
                          Layout{{4}, {3, 2}}, Layout{{2, 2}, {7, 5}}, Layout{{2, 2}, {1, 3}}}) {
    const int P = static_cast<int>(shape_numel(l.mesh));
    std::string mesh_name;
    for (std::size_t k = 0; k < l.mesh.size(); ++k)
      mesh_name += (k ? "x" : "") + std::to_string(l.mesh[k]);
    register_test(fmt::format("dtype i64 redistribute Shard/Replicate exactly, mesh {} shape {}",
                              mesh_name, shape_str(l.shape)),
                  "[dtype][redistribute][mp]",
                  [l, P] { run_ranks(P, [l](RankContext&) { check_moves(l.mesh, l.shape); }); });
  }

  // A pending sum of integers is not reduced: refused on every rank.
  register_test("dtype i64 redistribute of a Partial is refused on every rank",
                "[dtype][redistribute][mp]", [] {
                  run_ranks(2, [](RankContext&) {
                    DeviceMesh mesh(DeviceType::CPU, {2});
                    const DTensor p =
                        DTensor::from_local(wide_integers({3}), mesh, {Partial()}, Shape{3});
                    CHECK_THROWS_WITH(p.redistribute(mesh, {Replicate()}),
                                      Catch::Contains("i64 tensors hold integers"));
                  });
                });
}

}  // namespace
