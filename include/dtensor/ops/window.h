// The window engine: what every spatial operator (convolution, transposed
// convolution, pooling, padding, stencils of your own) shares.
//
// An operator declares, for each spatial dim, which inputs each output reads
// (a WindowDim: extent, stride, dilation, left/right padding, boundary mode;
// or the adaptive or transposed forms). From the global shape alone the
// engine plans, identically on every rank, which input window each rank
// needs to compute its share of the output (the chunk rule on the OUTPUT
// extent), who sends it what (several hops away when shards are narrow;
// nothing for P = 1), and how a gradient over the window goes back to its
// owners. WindowExchange runs that plan inside an operator handler:
//
//   gather()       the rank's input window, one tensor, with where it starts
//                  in global coordinates along every spatial dim;
//   scatter_add()  a gradient over that window, summed back onto the ranks
//                  that own each position (the backward of gather()).
//
// Both also come in two halves, for a kernel that reads its input and writes
// its gradient as tiles (TiledTensor) and for a handler that computes while
// messages travel: post() / Pending::wait() give the window as tiles (views
// of the shard and of the buffers the strips arrived in, no assembled copy);
// gradient() / Gradient::post() / finish() let the kernel write the window's
// gradient straight into the shard's gradient and the strips going back.
//
// With Boundary::Zeros the window stops at the edges of the input (the
// kernel knows from the global coordinates where the padding is); with the
// other modes the window includes the padding, filled with the reflected,
// replicated or wrapped values, fetched from whichever ranks own them, so the
// kernel sees no padding at all. docs/custom-operators.md shows a stencil
// written this way; docs/halo.md has the maths.
#pragma once

#include <compare>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dtensor/core/tensor.h"
#include "dtensor/ops/tiled_tensor.h"
#include "dtensor/placement/chunk.h"
#include "dtensor/placement/dtensor_spec.h"

namespace dtensor {

class OpCall;
class ProcessGroup;

/// What a window reads outside [0, L).
enum class Boundary {
  Zeros,      // nothing: the window is clipped to the input; the kernel pads
  Reflect,    // x[-i] = x[i], x[L-1+i] = x[L-1-i]  (needs padding < L)
  Replicate,  // x[-i] = x[0], x[L-1+i] = x[L-1]
  Circular,   // x[-i] = x[L-i]: the whole dim is a ring (needs padding <= L)
};
std::string_view boundary_name(Boundary b);

enum class PaddingMode;  // dtensor/ops/conv_params.h
/// A convolution's padding mode as the boundary its window reads.
Boundary boundary_of(PaddingMode mode);

/// Which inputs each output reads along one spatial dim.
struct WindowDim {
  enum class Kind {
    Sliding,     // output o reads o*stride - pad_left + j*dilation, j < kernel
    Adaptive,    // output o reads [floor(o*L/O), ceil((o+1)*L/O))
    Transposed,  // input i writes i*stride - pad_left + j*dilation, j < kernel
    Resample,    // output o reads PyTorch's interpolation source index of o:
                 // nearest (kernel 1) one input, linear (kernel 2) two
  };
  Kind kind = Kind::Sliding;
  std::int64_t kernel = 1;
  std::int64_t stride = 1;
  std::int64_t dilation = 1;
  std::int64_t pad_left = 0;
  std::int64_t pad_right = 0;
  /// Sliding: -1 for floor((L + pl + pr - E) / s) + 1, or a given length (a
  /// pool's ceil_mode). Adaptive: the output size (required). Transposed:
  /// -1 for (L-1)*s - pl - pr + E (pad_right carries output_padding's part).
  std::int64_t output_length = -1;
  Boundary boundary = Boundary::Zeros;
  /// Resample only: linear interpolation's align_corners, and the user's
  /// scale_factor (<= 0: none, the scale is L / O), as PyTorch's upsample
  /// kernels take them (resample_source() below).
  bool align_corners = false;
  double scale_factor = 0.0;

  /// Field by field, in declaration order: equal windows read alike (and
  /// key shared_halo_plan's table, so a new field takes part by itself).
  // (clang-tidy 14 reads the defaulted comparison's synthesized "<=> 0" as
  // a null pointer.)
  // NOLINTNEXTLINE(modernize-use-nullptr)
  friend auto operator<=>(const WindowDim&, const WindowDim&) = default;

  static WindowDim sliding(std::int64_t kernel, std::int64_t stride = 1, std::int64_t dilation = 1,
                           std::int64_t pad_left = 0, std::int64_t pad_right = 0,
                           Boundary boundary = Boundary::Zeros);
  static WindowDim adaptive(std::int64_t output_length);
  /// PyTorch's transposed convolution: symmetric `padding`, `output_padding`
  /// extra outputs on the right.
  static WindowDim transposed(std::int64_t kernel, std::int64_t stride, std::int64_t dilation,
                              std::int64_t padding, std::int64_t output_padding);

  /// PyTorch's interpolation (upsample_nearest / upsample_linear), output
  /// length `output_length`: kernel 1 nearest, kernel 2 linear.
  static WindowDim resample(std::int64_t output_length, bool linear, bool align_corners = false,
                            double scale_factor = 0.0);
  /// Resample: what output `o` reads over an input of `length`: inputs i0 and
  /// i1 (i1 = i0 for nearest, min(i0 + 1, L - 1) for linear) with weights
  /// w0 and w1 (nearest: 1 and 0), exactly as PyTorch computes them.
  struct ResampleTap {
    std::int64_t i0 = 0, i1 = 0;
    double w0 = 1.0, w1 = 0.0;
  };
  /// `backward`: the index PyTorch's backward uses (nearest: it copies at O
  /// = L and halves at O = 2L, where its forward computes floor(o * scale)).
  ResampleTap resample_source(std::int64_t length, std::int64_t o, bool backward = false) const;

  /// d * (kernel - 1) + 1.
  std::int64_t extent() const { return dilation * (kernel - 1) + 1; }
  /// The output length over an input of length L. InvalidArgument naming the
  /// parameter ("input", "kernel", "stride", "padding", ...) when the
  /// geometry is invalid or gives no output.
  std::int64_t output_length_for(std::int64_t length) const;
  /// The input positions outputs [o0, o1) read, [first, last] inclusive, in
  /// the padded (virtual) coordinates: they may reach outside [0, L). first >
  /// last when they read nothing (a transposed convolution's output_padding).
  std::pair<std::int64_t, std::int64_t> reads(std::int64_t length, std::int64_t o0,
                                              std::int64_t o1) const;
  std::string str() const;
  bool operator==(const WindowDim&) const = default;
};

/// The window a rank computes on along one spatial dim.
struct WindowSpan {
  std::int64_t tensor_dim = 0;
  /// Global outputs this rank computes: the chunk rule on the output extent
  /// when the dim is sharded, all of them otherwise.
  Extent output{};
  /// Global (virtual) input position of the window's first element and the
  /// window's length. With Boundary::Zeros, inside [0, L).
  std::int64_t origin = 0;
  std::int64_t length = 0;
  /// With Boundary::Zeros, the padding a sliding kernel over the window
  /// needs on each side to give exactly `output` (the part of the global
  /// padding this window touches); 0 where the padding is materialised.
  std::int64_t pad_left = 0;
  std::int64_t pad_right = 0;
};

/// The engine, inside a handler: plans from the input's spec and the dims'
/// geometry, exchanges over the call's groups with the call's tags.
class WindowExchange {
 public:
  /// `dims`: one WindowDim per spatial dim (tensor dims 2, 3, ...) of
  /// `input` ([N, C, spatial...]). Validates every dim (InvalidArgument
  /// naming the parameter). `call` provides the groups and tags; `stream`
  /// (0..7) tells apart exchanges of one call that are in flight together.
  WindowExchange(OpCall& call, const DTensorSpec& input, std::vector<WindowDim> dims,
                 int stream = 0);
  ~WindowExchange();
  WindowExchange(const WindowExchange&) = delete;
  WindowExchange& operator=(const WindowExchange&) = delete;

  /// One entry per spatial dim.
  const std::vector<WindowSpan>& spans() const { return spans_; }
  /// Whether this rank has any output (false when a sharded dim leaves it none).
  bool has_output() const { return has_output_; }
  /// This rank's output shape: local [N, C] of `channels`, output spans.
  Shape local_output_shape(std::int64_t batch, std::int64_t channels) const;
  /// The shape of the window gather() returns (and scatter_add() takes):
  /// the local shard's, with each spatial dim's window length.
  Shape local_window_shape() const;

  class Pending;
  class Gradient;

  /// The window of `local` (this rank's shard of the input). Read it only:
  /// where the window is a piece of the shard it is a view of `local`.
  Tensor gather(const Tensor& local);
  /// The same in two halves, as tiles: every dim's exchange but the last
  /// is done when post() returns; the last one's is in flight, and the
  /// window's tiles are laid out (the rank's own parts are views of `local`
  /// and hold data at once; received parts are views of the buffers they
  /// arrive in). A handler computes what needs no halo, then wait()s.
  Pending post(const Tensor& local);

  /// The gradient over the window, summed onto the owners: returns the
  /// gradient of this rank's shard (same shape as gather()'s `local`).
  Tensor scatter_add(const Tensor& window_grad);
  /// The same in two halves: a kernel writes the window's gradient into
  /// Gradient::window() (mostly straight into the shard's gradient and the
  /// buffers going back), post() starts the last dim's exchange, finish()
  /// waits and returns the shard's gradient. `stream` (-1: the engine's)
  /// tells it apart from a gather of the same call in flight at once.
  Gradient gradient(int stream = -1);

 private:
  struct Dim;
  void confirm_if_silent();
  // The last dim whose exchange does anything (dims_.size() when none).
  std::size_t last_live_dim() const;
  // `g` (the gradient over the windows of the dims before `end`) summed
  // back onto the owners along those dims, in reverse order.
  Tensor return_to_owners(Tensor g, std::size_t end, int stream) const;
  OpCall& call_;
  int stream_;
  Shape local_shape_;
  DType dtype_;
  Device device_;
  std::vector<std::unique_ptr<Dim>> dims_;
  std::vector<WindowSpan> spans_;
  bool has_output_ = true;
};

/// A window in flight (WindowExchange::post()). Dropped without wait() (the
/// handler's compute threw) it does not wait: a peer may have failed too.
class WindowExchange::Pending {
 public:
  Pending(Pending&&) noexcept;
  Pending& operator=(Pending&&) noexcept;
  ~Pending();
  /// The window's tiles; the received parts hold data only after wait().
  const TiledTensor& window() const;
  /// Waits for the exchange; returns the complete window.
  const TiledTensor& wait();

 private:
  friend class WindowExchange;
  struct State;
  explicit Pending(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

/// A window's gradient on its way back (WindowExchange::gradient()).
class WindowExchange::Gradient {
 public:
  Gradient(Gradient&&) noexcept;
  Gradient& operator=(Gradient&&) noexcept;
  ~Gradient();
  /// Where the kernel writes the window's gradient, every element of it
  /// (local_window_shape()).
  const TiledTensor& window() const;
  /// Starts sending it back (after the kernel has written window()).
  void post();
  /// Waits for it and returns the gradient of this rank's shard; post()s
  /// first if not done yet.
  Tensor finish();

 private:
  friend class WindowExchange;
  struct State;
  explicit Gradient(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace dtensor
