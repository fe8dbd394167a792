// One halo exchange for a chain of window operators.
//
// Run one by one, every convolution of a chain exchanges its own halo, in the
// forward and again in the backward. A chain of convolutions and pools (of
// stride 1 and "same", with zeros, reflect or replicate padding or circular
// throughout; or, padding with zeros, of any stride and padding: a chain
// that resamples; or, padding with zeros, of stride 1 around upsamples and
// transposed convolutions: a chain that upsamples), with group and batch
// norms (and their fused relu) and element-wise activations between them,
// can instead exchange the
// chain's combined halo once, up front: each rank computes every layer on a
// window as much larger than its shard as the layers after it still read
// (recomputing what its neighbours compute too), so the last layer's output
// is exactly the rank's shard. The norms' statistics count only the cells a
// rank owns, so they are the unfused run's; the backward sends the window's
// gradient back to its owners once as well.
//
// halo_chain() runs such a chain on a DTensor and records one autograd node
// for it; the results equal the layers run one by one (to rounding). The
// modules use it: nn::HaloRegion wraps a chain of modules, nn::Sequential
// fuses its runs of such layers; DTENSOR_HALO_FUSION=off (Config::halo_fusion)
// turns it off everywhere. docs/halo.md ("One exchange per chain") has the
// maths and the cost model that decides when a chain is worth fusing.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "dtensor/ops/activations.h"
#include "dtensor/ops/conv_params.h"
#include "dtensor/ops/upsample.h"
#include "dtensor/ops/window_ops.h"
#include "dtensor/placement/dtensor.h"

namespace dtensor {

/// A convolution of a chain: F.conv{N}d(x, weight, bias, params).
struct ChainConv {
  DTensor weight;
  std::optional<DTensor> bias{};
  ConvParams params{};
};

/// F.group_norm(x, groups, weight, bias, eps), then relu when `relu`.
struct ChainGroupNorm {
  std::int64_t num_groups = 1;
  double eps = 1e-5;
  std::optional<DTensor> weight{}, bias{};
  bool relu = false;
};

/// F.batch_norm(x, running_mean, running_var, weight, bias, training,
/// momentum, eps), then relu when `relu`. Training: the batch's statistics
/// (every rank's owned cells, over the batch and the spatial dims), and the
/// running statistics, when given, updated as F.batch_norm updates them
/// (halo_chain_updating returns them); else the running statistics. The
/// running statistics are [C], replicated, of the input's dtype.
struct ChainBatchNorm {
  std::optional<DTensor> running_mean{}, running_var{};
  std::optional<DTensor> weight{}, bias{};
  bool training = true;
  double momentum = 0.1;
  double eps = 1e-5;
  bool relu = false;
  /// Whether the chain returns this norm's running statistics updated.
  bool updates_running_stats() const { return training && running_mean.has_value(); }
};

/// An element-wise activation: F.<op>(x) with `op` one of "relu",
/// "leaky_relu" (negative_slope), "gelu" (approximate), "silu", "sigmoid",
/// "tanh". (A relu right after a group norm is cheaper as its `relu`.)
struct ChainActivation {
  std::string op = "relu";
  double negative_slope = 0.01;
  GeluApproximate approximate = GeluApproximate::None;
};

/// A max or average pool: F.max_pool{N}d or F.avg_pool{N}d(x, params). Its
/// padding is its own (ignored by max, counted or not by avg as
/// count_include_pad says), so a pool of stride 1 whose output is as large
/// as its input (padding left + right = dilation * (kernel - 1) along every
/// dim) joins chains of any padding mode but a ring; any other (a strided
/// pool, without ceil_mode) makes the chain resample.
struct ChainPool {
  bool average = false;  // avg_pool, else max_pool
  PoolParams params{};
};

/// An interpolation: F.interpolate(x, ...) as upsample(x, params). In a
/// chain it must be nearest, or linear without align_corners, by a whole
/// factor f along every spatial dim (the output f times the input; f = 1
/// too). To the plan it is a transposed window: output o reads input
/// floor(o / f) (nearest) or that and its neighbours (linear), so the
/// convolutions around it share one exchange (docs/halo.md).
struct ChainUpsample {
  UpsampleParams params{};
};

/// A transposed convolution: conv_transpose(x, weight, bias, params). In a
/// chain its window must be at least as wide as its stride (dilation * (k -
/// 1) + 1 >= stride, so every output hears from an input) and its
/// output_padding at most its padding; it is a transposed window to the
/// plan, as an upsample (a kernel equal to the stride, the U-Net's way up,
/// reads no neighbour).
struct ChainConvTranspose {
  DTensor weight;  // [C_in, C_out / groups, k...]
  std::optional<DTensor> bias{};
  ConvTransposeParams params{};
};

using ChainLayer = std::variant<ChainConv, ChainGroupNorm, ChainBatchNorm, ChainActivation,
                                ChainPool, ChainUpsample, ChainConvTranspose>;

/// Why `layers` on `input` cannot run as one exchange, or nullopt when they
/// can: a batch norm's running statistics go together, are given in eval
/// mode and, like its weight and bias, are [C], replicated, of the input's
/// dtype, and in training it has more than one value per channel; a chain
/// starts with a convolution and holds at least two window
/// layers (convolutions and pools); a pool obeys PyTorch's rules (each
/// padding side at most half the kernel, avg_pool undilated) and has no
/// ceil_mode where strided; every window layer's output has a cell; a
/// convolution pads with zeros, reflect or replicate (a reflect padding no
/// wider than what the edge rank holds), or every convolution's is circular
/// (the combined halo wrapping once at most, and no pool); a chain that
/// resamples (a window layer with a stride, or padding that is not "same",
/// or an upsample or transposed convolution) pads with zeros only; a chain
/// that upsamples has no strided convolution or pool, and its upsamples and
/// transposed convolutions are of the kinds ChainUpsample and
/// ChainConvTranspose say; and no layer after a norm whose statistics are the
/// batch's leaves input cells unread (a 1x1 convolution of stride 2, say:
/// the cells no rank computes would be counted); an activation is
/// one of ChainActivation's; the input is sharded (or replicated) on batch
/// and spatial dims only, with at least one spatial dim sharded; parameters
/// are replicated; the tensors are on the CPU; autocast is off or the dtype
/// is f64 (autocast lowers f32 convolutions and widens 16-bit norms, each
/// layer on its own). Pure: every rank gets the same answer.
std::optional<std::string> halo_chain_refusal(const DTensor& input,
                                              const std::vector<ChainLayer>& layers);

/// halo_chain_refusal's rules on the input alone (its shape, sharding,
/// device and autocast): where this refuses, no chain of any layers fuses on
/// `input`. Pure, as halo_chain_refusal.
std::optional<std::string> halo_chain_input_refusal(const DTensor& input);

/// What fusing `layers` on `input` is expected to save per training step
/// (forward + backward), in seconds: the exchanges it saves (each one's own
/// cost, and its messages at the link's latency and bandwidth), less the
/// recomputed overlap at the rank's compute rate (docs/halo.md). Negative:
/// fusing would cost.
double halo_chain_saving(const DTensor& input, const std::vector<ChainLayer>& layers);

/// Whether `layers` on `input` run fused: Config::halo_fusion is on, the chain
/// is fusible (halo_chain_refusal) and the cost model says it pays.
bool halo_chain_pays(const DTensor& input, const std::vector<ChainLayer>& layers);

/// The layers applied in order with one halo exchange (forward and backward).
/// InvalidArgument naming the reason when the chain is not fusible
/// (halo_chain_refusal); callers that want the unfused run then call the
/// layers one by one. A collective over the input's mesh. The output alone:
/// a batch norm that updates running statistics is refused (InvalidArgument:
/// halo_chain_updating returns them).
DTensor halo_chain(const DTensor& input, const std::vector<ChainLayer>& layers);

/// halo_chain's output, and the running statistics of its batch norms that
/// update them (ChainBatchNorm::updates_running_stats), in chain order: each
/// the (running_mean, running_var) F.batch_norm would leave, replicated.
struct HaloChainResult {
  DTensor output;
  std::vector<std::pair<DTensor, DTensor>> running_stats;
};

/// halo_chain(), with the batch norms' updated running statistics.
HaloChainResult halo_chain_updating(const DTensor& input, const std::vector<ChainLayer>& layers);

}  // namespace dtensor
