// The reorder every f32 convolution pays on each operand, done by hand:
// between the library's plain [n, c, h, w] tensors and oneDNN's channel-
// blocked layout (nChw16c, "aBcd16b": each pixel's 16 channels of a block
// side by side).
//
// Why not oneDNN's own reorder: its generic JIT reorder moved these at
// ~7 GB/s (source bytes) on the tensors of a U-Net step, a fifth of one
// rank's step at P = 2 (docs/performance.md). The copy is a 16 x 16
// transpose of each block's rows, which AVX-512 does in registers.
#pragma once

#include <dnnl.hpp>

#include "dtensor/core/tensor.h"

namespace dtensor::onednn {

/// Blocked -> plain copies into a tensor whose channels span at least this
/// many bytes (stride(1) * size(1) * 4) and whose rows start on 64-byte lines
/// write with non-temporal stores: with ordinary ones, each of the 16 plain
/// rows a block writes is first read for ownership, and the copy ran at
/// 9 GB/s instead of 42 GB/s. A smaller tensor may still be in the cache
/// when the next operator reads it, so it is written through the cache.
inline constexpr std::int64_t kChannelBlockStreamBytes = std::int64_t{1} << 20;

/// Copies `plain` (f32, 4-D, any strides with the last dim's stride 1) into
/// (`into`) or out of the nChw16c memory `blocked` describes at `base`
/// (whose offset0 places the region), element for element. Returns false,
/// having touched nothing, where it does not apply (another dtype or layout,
/// channels not a multiple of 16, a CPU without AVX-512): the caller then
/// uses oneDNN's reorder.
bool copy_channel_blocked(const Tensor& plain, const dnnl::memory::desc& blocked, void* base,
                          bool into);

}  // namespace dtensor::onednn
