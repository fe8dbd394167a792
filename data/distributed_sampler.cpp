#include "dtensor/data/distributed_sampler.h"

#include <numeric>
#include <random>
#include <utility>

#include "dtensor/core/errors.h"

namespace dtensor::data {

DistributedSampler::DistributedSampler(std::int64_t dataset_size, std::int64_t num_replicas,
                                       std::int64_t rank, SamplerOptions options)
    : size_(dataset_size), replicas_(num_replicas), rank_(rank), options_(options) {
  check_arg(dataset_size >= 0, "data", "DistributedSampler: dataset_size {} is negative",
            dataset_size);
  check_arg(num_replicas > 0 && rank >= 0 && rank < num_replicas, "data",
            "DistributedSampler: rank {} is not in [0, num_replicas {})", rank, num_replicas);
  // torch: ceil((N - R) / R) with drop_last and an uneven split (= floor(N / R)), else ceil(N / R).
  num_samples_ = options.drop_last && size_ % replicas_ != 0 ? size_ / replicas_
                                                             : (size_ + replicas_ - 1) / replicas_;
}

std::vector<std::int64_t> DistributedSampler::indices() const {
  std::vector<std::int64_t> order(static_cast<std::size_t>(size_));
  std::iota(order.begin(), order.end(), std::int64_t{0});
  if (options_.shuffle) {
    // torch.randperm on a CPU generator seeded with seed + epoch: its mt19937
    // takes the seed's low 32 bits, and for n < 2^32 / 20 the shuffle swaps
    // element i with i + (next 32-bit draw mod (n - i)).
    std::mt19937 gen(
        static_cast<std::uint32_t>(options_.seed + static_cast<std::uint64_t>(epoch_)));
    for (std::int64_t i = 0; i + 1 < size_; ++i) {
      const auto z = static_cast<std::int64_t>(gen() % static_cast<std::uint64_t>(size_ - i));
      std::swap(order[static_cast<std::size_t>(i)], order[static_cast<std::size_t>(i + z)]);
    }
  }
  // Pad by repeating the head (cyclically, if it is shorter than the padding)
  // or cut the tail, to total_size; then every replicas-th from this rank.
  const std::int64_t total = num_samples_ * replicas_;
  std::vector<std::int64_t> mine;
  mine.reserve(static_cast<std::size_t>(num_samples_));
  for (std::int64_t i = rank_; i < total; i += replicas_)
    mine.push_back(order[static_cast<std::size_t>(i % size_)]);
  return mine;
}

}  // namespace dtensor::data
