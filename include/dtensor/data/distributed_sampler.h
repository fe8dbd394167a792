// Which samples of a dataset each data-parallel replica sees in an epoch:
// torch.utils.data.DistributedSampler's algorithm, index for index. Every
// replica draws the same permutation from (seed + epoch) (torch's randperm:
// a Fisher-Yates shuffle driven by an mt19937 seeded with the low 32 bits),
// pads it by repeating its head to a multiple of the replicas (or drops the
// tail with drop_last), and takes every num_replicas-th index from its rank.
// No communication: the indices follow from the arguments alone.
#pragma once

#include <cstdint>
#include <vector>

namespace dtensor::data {

struct SamplerOptions {
  bool shuffle = true;
  std::uint64_t seed = 0;
  /// Drop the tail that does not divide evenly instead of padding with repeats.
  bool drop_last = false;
};

class DistributedSampler {
 public:
  /// InvalidArgument unless dataset_size >= 0 and 0 <= rank < num_replicas.
  DistributedSampler(std::int64_t dataset_size, std::int64_t num_replicas, std::int64_t rank,
                     SamplerOptions options = {});

  /// The epoch whose permutation indices() draws (call it at each epoch's
  /// start, as with torch; the same on every replica).
  void set_epoch(std::int64_t epoch) { epoch_ = epoch; }
  std::int64_t epoch() const { return epoch_; }
  /// Samples per replica per epoch, the same on every replica.
  std::int64_t num_samples() const { return num_samples_; }
  /// This replica's sample indices for the current epoch.
  std::vector<std::int64_t> indices() const;

 private:
  std::int64_t size_, replicas_, rank_;
  SamplerOptions options_;
  std::int64_t num_samples_;
  std::int64_t epoch_ = 0;
};

}  // namespace dtensor::data
