#include "tests/placement/redistribute_check.h"

#include <catch2/catch.hpp>

#include "dtensor/placement/dtensor.h"
#include "dtensor/placement/redistribute.h"
#include "tests/placement/redistribute_oracle.h"

namespace dtensor::testing {

void check_transition(const DeviceMesh& mesh, const Shape& gshape, DType dtype,
                      const Placements& src, const Placements& dst) {
  INFO("redistribute [" << placements_str(src) << "] -> [" << placements_str(dst) << "] of "
                        << shape_str(gshape) << " on " << mesh.str());
  const Tensor G = testing::integer_tensor(gshape, dtype, 7);
  const auto coord = *mesh.get_coordinate();
  std::vector<bool> src_split(src.size(), true), dst_split(src.size());
  // A Partial kept from src stays split; a new one holds the value on index 0.
  for (std::size_t i = 0; i < src.size(); ++i)
    dst_split[i] = src[i] == dst[i];
  const Tensor local = oracle_local(G, mesh.shape(), src, coord, src_split);
  DTensor x = DTensor::from_local(local, mesh, src, gshape);
  DTensor y = x.redistribute(mesh, dst);
  REQUIRE(y.placements() == dst);
  const Tensor expect = oracle_local(G, mesh.shape(), dst, coord, dst_split);
  REQUIRE(y.to_local().shape() == expect.shape());
  REQUIRE(max_abs_diff(y.to_local(), expect) == 0.0);
  REQUIRE(max_abs_diff(y.full_tensor(), G) == 0.0);
  // The input is never modified.
  REQUIRE(max_abs_diff(x.to_local(), local) == 0.0);
  bool src_partial = false;
  for (auto& p : src)
    src_partial = src_partial || p.is_partial();
  if (!src_partial) {
    DTensor back = y.redistribute(mesh, src);
    REQUIRE(max_abs_diff(back.to_local(), local) == 0.0);
  }
}

bool is_error_pair(const Placements& src, const Placements& dst) {
  for (std::size_t i = 0; i < src.size(); ++i)
    if (src[i].is_shard() && dst[i].is_partial()) return true;
  return false;
}

void check_error_pair(const DeviceMesh& mesh, const Shape& gshape, const Placements& src,
                      const Placements& dst) {
  const Tensor G = testing::integer_tensor(gshape, DType::F64, 7);
  const Tensor local = oracle_local(G, mesh.shape(), src, *mesh.get_coordinate(),
                                    std::vector<bool>(src.size(), true));
  DTensor x = DTensor::from_local(local, mesh, src, gshape);
  try {
    x.redistribute(mesh, dst);
    FAIL("expected InvalidArgument for " << placements_str(src) << " -> " << placements_str(dst));
  } catch (const InvalidArgument& e) {
    REQUIRE(std::string(e.what()).find("not supported") != std::string::npos);
  }
}

}  // namespace dtensor::testing
