#include "dtensor/data/batch_iterator.h"

#include <algorithm>
#include <utility>

#include "dtensor/core/errors.h"

namespace dtensor::data {
namespace {

// The sampler for this rank: the data-parallel mesh dim's size and this
// rank's coordinate on it, checked against the dataset's placements.
DistributedSampler sampler_for(const DTensor& dataset, std::optional<std::int64_t> dp_dim,
                               SamplerOptions options) {
  const DeviceMesh& mesh = dataset.mesh();
  mesh.require_member("BatchIterator");
  const Placements& p = dataset.placements();
  check_arg(dataset.ndim() >= 1, "data",
            "BatchIterator: the dataset is 0-d; samples run along dim 0");
  for (std::size_t m = 0; m < p.size(); ++m) {
    DTENSOR_CHECK_ARG(!p[m].is_partial(), "data",
                      "BatchIterator: dataset placements {} hold a Partial", placements_str(p));
    DTENSOR_CHECK_ARG(
        !p[m].is_shard() || p[m].normalized(dataset.ndim()).dim() != 0, "data",
        "BatchIterator: dataset placements {} shard the sample dim 0 on mesh dim {}; every "
        "rank needs all samples of its slab",
        placements_str(p), m);
  }
  if (!dp_dim) return DistributedSampler(dataset.shape()[0], 1, 0, options);
  DTENSOR_CHECK_ARG(*dp_dim >= 0 && *dp_dim < mesh.ndim(), "data",
                    "BatchIterator: data-parallel mesh dim {} is not a dim of {}", *dp_dim,
                    mesh.str());
  DTENSOR_CHECK_ARG(
      p[static_cast<std::size_t>(*dp_dim)].is_replicate(), "data",
      "BatchIterator: dataset placements {} are not Replicate on the data-parallel mesh "
      "dim {}",
      placements_str(p), *dp_dim);
  return DistributedSampler(dataset.shape()[0], mesh.size(*dp_dim), mesh.get_local_rank(*dp_dim),
                            options);
}

}  // namespace

BatchIterator::BatchIterator(DTensor dataset, std::optional<std::int64_t> data_parallel_dim,
                             std::int64_t batch_size, SamplerOptions sampler)
    : dataset_(std::move(dataset)),
      dp_dim_(data_parallel_dim),
      batch_size_(batch_size),
      sampler_(sampler_for(dataset_, data_parallel_dim, sampler)) {
  check_arg(batch_size > 0, "data", "BatchIterator: batch_size {} is not positive", batch_size);
  indices_ = sampler_.indices();
}

void BatchIterator::set_epoch(std::int64_t epoch) {
  sampler_.set_epoch(epoch);
  indices_ = sampler_.indices();
}

std::int64_t BatchIterator::num_batches() const {
  return (sampler_.num_samples() + batch_size_ - 1) / batch_size_;
}

DTensor BatchIterator::batch(std::int64_t i) const {
  DTENSOR_CHECK_ARG(i >= 0 && i < num_batches(), "data",
                    "BatchIterator: batch {} is not in [0, {})", i, num_batches());
  const std::int64_t first = i * batch_size_;
  const std::int64_t b = std::min(batch_size_, sampler_.num_samples() - first);
  const Tensor& local = dataset_.to_local();
  Shape shape = local.shape();
  shape[0] = b;
  Tensor out = Tensor::empty(shape, local.dtype(), local.device());
  for (std::int64_t j = 0; j < b; ++j)
    out.narrow(0, j, 1).copy_(local.narrow(0, indices_[static_cast<std::size_t>(first + j)], 1));
  // Every replica holds b samples: Shard(0) over the data-parallel dim makes
  // them one batch of replicas * b (the chunk rule splits it evenly).
  Placements placements = dataset_.placements();
  Shape global = dataset_.shape();
  global[0] = b;
  if (dp_dim_) {
    placements[static_cast<std::size_t>(*dp_dim_)] = Shard(0);
    global[0] = b * dataset_.mesh().size(*dp_dim_);
  }
  return DTensor(out, DTensorSpec(dataset_.mesh(), placements, global, dataset_.dtype()));
}

}  // namespace dtensor::data
