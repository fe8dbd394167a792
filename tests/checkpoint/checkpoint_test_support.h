// Helpers of the checkpoint tests: a directory every rank of the test shares,
// seeded tensors laid out by any spec, and the bit-exact comparison of a
// loaded tensor against the original global tensor (Tensor::rand of the same
// seed: generated independently of the checkpoint code).
#pragma once

#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <random>
#include <string>

#include "dtensor/dtensor.h"

namespace dtensor::testing {

/// A fresh directory under the system's temp dir, the same on every rank of
/// the world (rank 0 picks the name); removed by rank 0 once every rank is done.
class SharedTempDir {
 public:
  explicit SharedTempDir(const std::string& tag) {
    Tensor id =
        Tensor::full({1}, static_cast<double>(std::random_device{}() & 0x3fffffffu), DType::F64);
    world()->broadcast(id, 0);
    path_ = (std::filesystem::temp_directory_path() /
             ("dtensor-ckpt-" + tag + "-" + std::to_string(static_cast<long>(id.item({0})))))
                .string();
    if (get_rank() == 0) std::filesystem::create_directories(path_);
    world()->barrier();
  }
  ~SharedTempDir() {
    if (std::uncaught_exceptions() > 0) return;  // a rank failed: leave it for inspection
    try {
      world()->barrier();
      if (get_rank() == 0) std::filesystem::remove_all(path_);
    } catch (...) {
    }
  }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

/// Whether a rank at this spec's coordinate holds zeros for a Partial(sum)
/// dim (the value sits on index 0 of that mesh dim).
inline bool partial_zero_here(const DTensorSpec& spec) {
  const auto& c = spec.mesh().get_coordinate();
  if (!c) return false;
  for (std::size_t d = 0; d < spec.placements().size(); ++d)
    if (spec.placements()[d].is_partial() && spec.placements()[d].reduce_op() == ReduceOp::Sum &&
        (*c)[d] != 0)
      return true;
  return false;
}

/// This rank's part of rand(shape, dtype, seed) laid out by `spec`.
inline Tensor expected_local(const DTensorSpec& spec, std::uint64_t seed) {
  if (partial_zero_here(spec)) return Tensor::zeros(spec.local_shape(), spec.dtype());
  return Tensor::rand_slice(spec.shape(), spec.global_offset(), spec.local_shape(), spec.dtype(),
                            seed);
}

inline DTensor seeded(const DeviceMesh& mesh, const Placements& placements, const Shape& shape,
                      DType dtype, std::uint64_t seed) {
  DTensorSpec spec(mesh, placements, shape, dtype);
  return DTensor(expected_local(spec, seed), spec);
}

/// The loaded tensor's local part equals the original's bit for bit.
inline void require_bit_exact(const std::string& name, const DTensor& loaded, std::uint64_t seed) {
  INFO("tensor '" << name << "' as " << loaded.spec().str() << " on rank " << get_rank());
  const Tensor want = expected_local(loaded.spec(), seed);
  const Tensor got = loaded.to_local().to(Device::cpu()).contiguous();
  REQUIRE(got.shape() == want.shape());
  REQUIRE(got.dtype() == want.dtype());
  REQUIRE(std::memcmp(got.data_ptr(), want.data_ptr(), want.nbytes()) == 0);
}

}  // namespace dtensor::testing
