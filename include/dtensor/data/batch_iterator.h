// Batches of a dataset DTensor for data x spatial parallel meshes. The
// dataset [N, ...] is Replicate on the data-parallel mesh dim and may be
// sharded on the others (spatial dims: H, W, ...) but never along its sample
// dim 0, so every rank holds all N samples of its spatial slab. A batch takes
// this replica's next batch_size indices from a DistributedSampler (replicas
// and rank: the data-parallel mesh dim's size and this rank's coordinate on
// it) and is the DTensor [replicas * b, ...] that is Shard(0) on the
// data-parallel dim and keeps the spatial placements: each rank's local
// tensor is its own b samples of its own slab. Inputs and targets batched by
// two iterators with equal arguments get the same samples.
#pragma once

#include <cstdint>
#include <optional>

#include "dtensor/data/distributed_sampler.h"
#include "dtensor/placement/dtensor.h"

namespace dtensor::data {

class BatchIterator {
 public:
  /// `data_parallel_dim`: the mesh dim the samples are spread over, or
  /// nullopt for one replica (every rank gets every batch). InvalidArgument
  /// naming the dataset's placements when dim 0 is sharded, the data-parallel
  /// dim is not Replicate or a placement is Partial; and unless batch_size > 0.
  BatchIterator(DTensor dataset, std::optional<std::int64_t> data_parallel_dim,
                std::int64_t batch_size, SamplerOptions sampler = {});

  /// Starts an epoch: the sampler's permutation for `epoch`.
  void set_epoch(std::int64_t epoch);
  /// Batches per epoch: ceil(num_samples / batch_size) (the last may be
  /// smaller; use the sampler's drop_last to trim the dataset instead).
  std::int64_t num_batches() const;
  /// Batch `i` of the current epoch, 0 <= i < num_batches().
  DTensor batch(std::int64_t i) const;

 private:
  DTensor dataset_;
  std::optional<std::int64_t> dp_dim_;
  std::int64_t batch_size_;
  DistributedSampler sampler_;
  std::vector<std::int64_t> indices_;
};

}  // namespace dtensor::data
