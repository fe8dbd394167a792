// load_checkpoint: every rank reads the index, works out the box of each
// target it holds, and reads from every saved shard that overlaps that box
// only the checksum blocks it needs. One all-gather at the end turns any
// rank's failure into the same error everywhere.
#include <algorithm>

#include <fmt/ranges.h>

#include "checkpoint/checkpoint_index.h"
#include "checkpoint/collective_outcome.h"
#include "checkpoint/coordinating_group.h"
#include "checkpoint/shard_reader.h"
#include "dtensor/checkpoint/checkpoint.h"
#include "dtensor/placement/rank_agreement.h"

namespace dtensor {

namespace {

using namespace checkpoint;

// Each target's index entry. Every target that does not match (not in the
// checkpoint, another shape or dtype) is named in one InvalidArgument, as
// PyTorch's load_state_dict lists every missing key and size mismatch: a
// user fixing a model learns of all of them at once.
std::vector<const CheckpointEntry*> matching_entries(const CheckpointIndex& index,
                                                     const std::vector<CheckpointTarget>& targets,
                                                     const std::string& dir) {
  std::vector<const CheckpointEntry*> out;
  std::vector<std::string> problems;
  for (const auto& t : targets) {
    auto it = std::find_if(index.tensors.begin(), index.tensors.end(),
                           [&](const CheckpointEntry& e) { return e.name == t.name; });
    if (it == index.tensors.end())
      problems.push_back(fmt::format("tensor '{}' is not in the checkpoint", t.name));
    else if (it->shape != t.spec.shape())
      problems.push_back(
          fmt::format("tensor '{}': the checkpoint holds shape {}, the target asks for {}", t.name,
                      shape_str(it->shape), shape_str(t.spec.shape())));
    else if (it->dtype != t.spec.dtype())
      problems.push_back(fmt::format("tensor '{}': the checkpoint holds {}, the target asks for {}",
                                     t.name, dtype_name(it->dtype), dtype_name(t.spec.dtype())));
    out.push_back(it == index.tensors.end() ? nullptr : &*it);
  }
  DTENSOR_CHECK_ARG(problems.empty(), "checkpoint",
                    "{} of {} target(s) do not match the checkpoint '{}': {}", problems.size(),
                    targets.size(), dir, fmt::join(problems, "; "));
  return out;
}

// Partial(sum) holds the value on index 0 of its mesh dim and zeros elsewhere
// (as distribute_tensor places it); the other Partial ops hold it everywhere.
bool holds_zeros(const DTensorSpec& spec) {
  const auto& coord = spec.mesh().get_coordinate();
  if (!coord) return false;
  for (std::size_t d = 0; d < spec.placements().size(); ++d) {
    const Placement& p = spec.placements()[d];
    if (p.is_partial() && p.reduce_op() == ReduceOp::Sum && (*coord)[d] != 0) return true;
  }
  return false;
}

DTensor load_one(const CheckpointEntry& e, const DTensorSpec& spec, ShardReader& reader) {
  const Box mine{spec.global_offset(), spec.local_shape()};
  Tensor local = Tensor::empty(mine.extents, spec.dtype());
  if (holds_zeros(spec)) {
    local.zero_();
  } else if (local.numel() > 0) {
    for (const auto& s : e.shards)
      if (auto region = intersect(Box{s.offsets, s.extents}, mine))
        reader.read_region(e, s, *region, mine, local.data_ptr());
  }
  if (spec.mesh().contains_this_rank() && spec.mesh().device().is_cuda())
    local = local.to(spec.mesh().device());
  return DTensor(local, spec);
}

}  // namespace

std::vector<CheckpointTarget> checkpoint_targets(const NamedDTensors& tensors) {
  std::vector<CheckpointTarget> out;
  for (const auto& [name, t] : tensors)
    out.push_back({name, t.spec()});
  return out;
}

NamedDTensors load_checkpoint(const std::string& dir,
                              const std::vector<CheckpointTarget>& targets) {
  std::vector<std::string> names;
  std::vector<const DTensorSpec*> specs;
  for (const auto& t : targets) {
    names.push_back(t.name);
    specs.push_back(&t.spec);
  }
  auto group = coordinating_group(specs, "load_checkpoint");
  const auto call = describe_call(names, specs);
  check_ranks_agree(*group, call.fingerprint, "load_checkpoint", call.text);

  NamedDTensors out;
  std::exception_ptr error;
  try {
    const CheckpointIndex index = read_index(dir);
    const auto entries = matching_entries(index, targets, dir);
    ShardReader reader(dir, index);
    for (std::size_t i = 0; i < targets.size(); ++i)
      out.emplace_back(targets[i].name, load_one(*entries[i], targets[i].spec, reader));
  } catch (...) {
    error = std::current_exception();
  }
  gather_outcomes(*group, error, "", "load_checkpoint");
  return out;
}

std::vector<CheckpointEntry> read_checkpoint_index(const std::string& dir) {
  return read_index(dir).tensors;
}

}  // namespace dtensor
