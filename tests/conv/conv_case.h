// One distributed convolution check: build seeded global tensors, distribute
// them, run convolution and convolution_backward through the library, and
// compare every result with the naive f64 oracle (tools/reference/reference_conv).
#pragma once

#include <cstdint>
#include <random>
#include <string>

#include "dtensor/core/device_mesh.h"
#include "dtensor/ops/convolution.h"

namespace dtensor::testing {

struct ConvCase {
  Shape input;  // [N, C, spatial...]
  std::int64_t out_channels = 1;
  Shape kernel;       // one per spatial dim
  ConvParams params;  // expanded
  bool bias = true;
  Shape mesh;
  Placements input_placements;
  Placements weight_placements;  // empty: replicated
  DType dtype = DType::F64;
  std::uint64_t seed = 0;
  std::string str() const;
};

struct ConvErrors {
  double output = 0, grad_input = 0, grad_weight = 0, grad_bias = 0;
};

/// Runs the case on this rank (all ranks of the mesh must call it) and
/// REQUIREs every error under the dtype's tolerance. Returns the errors.
ConvErrors check_conv_case(const ConvCase& c);

/// A random valid case: 1-3 spatial dims, strides 1-4, dilations 1-3,
/// asymmetric padding 0-4, kernels 1-7, groups, shapes that give uneven,
/// empty and narrower-than-halo shards, placements for the mesh.
ConvCase random_conv_case(std::mt19937_64& rng, const Shape& mesh, DType dtype);

/// The same with padding_mode reflect, replicate or circular (padding
/// within F.pad's limits).
ConvCase random_padding_mode_case(std::mt19937_64& rng, const Shape& mesh, DType dtype);

/// The tolerance for comparing with the f64 oracle: 1e-10 (f64) or a bound
/// that grows with the reduction length and the values' magnitude.
double conv_tolerance(DType dtype, std::int64_t reduction, double magnitude);

}  // namespace dtensor::testing
