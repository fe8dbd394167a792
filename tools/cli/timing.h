// The --bench timing both tools share: passes run interleaved, started by
// all ranks at one instant, each taking the slowest rank's time, medians
// over iterations.
#pragma once

#include <functional>
#include <vector>

#include "dtensor/core/dtype.h"

namespace dtensor::cli {

/// Median of `v` (the mean of the middle two for an even count); NaN when empty.
double median(std::vector<double> v);

/// Collective over the world: every rank calls it. Runs each of `fns`
/// warmup + iters times, interleaved (iteration i runs fns[0], then fns[1],
/// ...), so that a distributed pass and its local counterpart see the same
/// machine even when its load drifts; each run starts on all ranks at one
/// instant. Returns, per function, the median over the timed iterations of
/// the slowest rank's time in milliseconds. On CUDA each run ends when the
/// device has finished it (else only the launches would be timed).
std::vector<double> interleaved_medians(DeviceType device, int iters, int warmup,
                                        const std::vector<std::function<void()>>& fns);

}  // namespace dtensor::cli
