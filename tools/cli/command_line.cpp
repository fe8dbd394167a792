#include "tools/cli/command_line.h"

#include <string>

#include <fmt/format.h>

#include "tools/cli/value_reader.h"

namespace dtensor::cli {

void check_input_placements(const Placements& placements, std::int64_t rank) {
  for (const Placement& p : placements) {
    if (p.is_shard() && (p.dim() < -rank || p.dim() >= rank))
      fail("--placements", fmt::format("{} is outside the {}-d input (--input)", p.str(), rank));
    if (p.is_partial() && p.reduce_op() != ReduceOp::Sum)
      fail("--placements", fmt::format("{}: only P / P(sum) inputs are supported", p.str()));
  }
}

void check_device(DeviceType device, const std::function<CudaAvailability()>& ask) {
  if (device != DeviceType::CUDA) return;
  const CudaAvailability cuda = ask();
  if (!cuda.available)
    fail("--device", fmt::format("cuda is not available here ({})",
                                 cuda.reason.empty() ? "no usable device" : cuda.reason));
}

void resolve_mesh(Shape& mesh, Placements& placements, const Shape& input, int world_size) {
  if (world_size < 1) fail("--mesh", fmt::format("the world size is {}", world_size));
  if (mesh.empty()) {
    mesh = {world_size};
  } else {
    // The product may not even fit in 64 bits (the fuzzer found --mesh
    // 1008820088210292x10292x2): compare without overflowing.
    std::int64_t ranks = 1;
    bool overflow = false;
    for (auto m : mesh)
      overflow = overflow || __builtin_mul_overflow(ranks, m, &ranks);
    if (overflow || ranks != world_size) {
      std::string shape;
      for (auto m : mesh)
        shape += (shape.empty() ? "" : "x") + std::to_string(m);
      fail("--mesh", fmt::format("{} holds {} ranks but the job has {} (dtensor-run -n)", shape,
                                 overflow ? std::string("more than 2^63") : std::to_string(ranks),
                                 world_size));
    }
  }
  const std::int64_t mesh_dims = static_cast<std::int64_t>(mesh.size());
  const std::int64_t rank = static_cast<std::int64_t>(input.size());
  if (placements.empty()) {
    for (std::int64_t i = 0; i < mesh_dims; ++i) {
      const std::int64_t d = rank - mesh_dims + i;
      placements.push_back(d >= 2 ? Placement::shard(d) : Placement::replicate());
    }
  } else if (static_cast<std::int64_t>(placements.size()) != mesh_dims) {
    fail("--placements",
         fmt::format("{} placement(s) for a {}-d mesh (--mesh); give one per mesh dim",
                     placements.size(), mesh_dims));
  }
  for (auto& p : placements)
    p = p.normalized(rank);
}

}  // namespace dtensor::cli
