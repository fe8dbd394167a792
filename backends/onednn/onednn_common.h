// What the three oneDNN convolution passes share: the engine and streams, the
// mapping of tensors and ConvParams to oneDNN descriptors, operands that move
// between the user's plain NC(D)HW layout and the primitive's preferred one,
// and the primitive cache.
//
// Private to backends/onednn: nothing outside this folder includes dnnl.hpp.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <dnnl.hpp>

#include "dtensor/core/tensor.h"
#include "dtensor/ops/conv_params.h"
#include "dtensor/ops/tiled_tensor.h"

namespace dtensor::onednn {

/// The CPU engine, created on first use (not at load time: a process may fork
/// first, docs/design.md §6).
const dnnl::engine& engine();
/// This thread's stream on engine(): oneDNN streams are not meant to be shared
/// between threads that submit concurrently.
dnnl::stream& stream();

dnnl::memory::data_type data_type(DType t);

/// Whether oneDNN runs bf16 primitives on this CPU: oneDNN 2.6 has bf16
/// only with AVX-512 (one rule for every primitive), so on an AVX2 CPU the
/// bf16 convolutions and activations run widened to f32 and rounded once.
/// Asked of oneDNN itself on first use (loading the library creates no
/// oneDNN object).
bool runs_bf16();

/// oneDNN's view of a convolution's geometry (dilation is d - 1 in oneDNN).
struct ConvDims {
  dnnl::memory::dims src, weights, bias, dst;  // weights are goi... when groups > 1
  dnnl::memory::dims strides, dilates, padding_l, padding_r;
  dnnl::memory::format_tag src_tag, weights_tag;  // plain NC(D)HW / (g)oi(d)hw

  ConvDims(const Shape& input, const Shape& weight, const ConvParams& p);
};

/// Descriptors for the user's plain layout, and "any" for the primitive to choose.
dnnl::memory::desc plain_md(const dnnl::memory::dims& dims, DType t, dnnl::memory::format_tag tag);
dnnl::memory::desc any_md(const dnnl::memory::dims& dims, DType t);

/// Holds the buffers of reordered operands until the primitive that uses them
/// has run: create one at the top of every pass. Buffers under 1 MiB come
/// from this thread's ScratchArena (scratch_arena.h), larger ones from the
/// library's block cache: oneDNN's own allocations are fresh memory on every
/// call, and page-faulting a few MiB costs milliseconds each time.
class ScratchScope {
 public:
  ScratchScope();
  ~ScratchScope();
  ScratchScope(const ScratchScope&) = delete;
  ScratchScope& operator=(const ScratchScope&) = delete;
  /// A buffer for `md`, alive until the innermost scope ends.
  static dnnl::memory memory(const dnnl::memory::desc& md);
  /// Keeps `t` alive until the innermost scope ends (a temporary a primitive reads).
  static void keep(const Tensor& t);
  /// Raw bytes alive until the innermost scope ends: one buffer that the bands
  /// of a convolution reuse, each viewing it with its own descriptor.
  static void* bytes(std::size_t n);
};

/// One argument of a primitive: the user's plain layout and the primitive's.
/// When they differ, a cached reorder converts between them on every call.
class Operand {
 public:
  Operand() = default;
  /// `is_input`: the reorder runs user -> primitive, else primitive -> user.
  Operand(const dnnl::memory::desc& user, const dnnl::memory::desc& prim, bool is_input);

  /// Memory in the primitive's layout holding the user's data (reordered if needed).
  dnnl::memory input(const Tensor& t) const;
  /// Memory the primitive writes into: the user's tensor itself, or a temporary...
  dnnl::memory output(const Tensor& t) const;
  /// ...which this then reorders into the user's tensor.
  void finish_output(dnnl::memory written, const Tensor& t) const;

  /// The same for an operand held in tiles (a halo window): each tile is
  /// reordered straight into its place (or out of it), and the assembled
  /// plain copy never exists, unless the operand is not tileable (below):
  /// then it goes through one assembled tensor.
  dnnl::memory input(const TiledTensor& t) const;
  /// `temp` receives the assembled tensor when one is needed; pass it on.
  dnnl::memory output(const TiledTensor& t, Tensor& temp) const;
  void finish_output(dnnl::memory written, const TiledTensor& t, const Tensor& temp) const;

  /// Whether regions of the primitive's layout can be addressed in place: a
  /// blocked or plain layout, without channel padding when it is an input
  /// (a padded output's padding is the primitive's to write).
  bool tileable() const { return tileable_; }
  const dnnl::memory::desc& primitive_desc() const { return prim_; }
  /// Reorders `view` (plain, any strides, its own dtype: converted) into
  /// (`into`) or out of its place at `offset` in `whole` (memory in the
  /// primitive's layout). With `accumulate`, the result is added to what the
  /// destination holds.
  void reorder_region(const Tensor& view, const Shape& offset, const dnnl::memory& whole, bool into,
                      bool accumulate = false) const;

 private:
  dnnl::memory::desc user_, prim_;
  bool same_ = true;
  bool tileable_ = false;  // tiles map to sub-memories of prim_
  dnnl::reorder reorder_;
};

/// An input reordered once and reused while consecutive primitives (the bands
/// of one convolution) want it in the same layout: the weights.
class ReusedInput {
 public:
  explicit ReusedInput(const Tensor& t) : t_(t) {}
  /// Memory for `op`; allocated in the innermost ScratchScope when the layout changes.
  dnnl::memory get(const Operand& op);

 private:
  const Tensor& t_;
  dnnl::memory::desc desc_;
  dnnl::memory mem_;
};

/// One buffer per operand for all the bands of a convolution: sized for the
/// largest band, viewed by each band with its own descriptor. (Allocating per
/// band costs page faults: band buffers sit below the allocator's cache.)
class BandBuffer {
 public:
  /// Allocates, in the innermost ScratchScope, room for the largest of `descs`.
  explicit BandBuffer(const std::vector<dnnl::memory::desc>& descs);
  dnnl::memory view(const dnnl::memory::desc& md) const;

 private:
  void* data_ = nullptr;
};

/// A primitive's lookup key: the pass's name, then raw bytes (not text), built
/// in this thread's one reused buffer, so that a key made on every call (and
/// per tile) allocates nothing once the buffer has grown. The view it gives
/// is valid until the next key is started on this thread; PlanCache copies
/// it before building a missing plan, whose making may key other plans.
class PlanKey {
 public:
  explicit PlanKey(std::string_view pass);
  PlanKey& put(std::int64_t v) { return bytes(&v, sizeof v); }
  PlanKey& put_list(const std::vector<std::int64_t>& v);
  PlanKey& bytes(const void* p, std::size_t n);
  /// The descriptor's bytes: everything that decides a reorder's code.
  PlanKey& desc(const dnnl::memory::desc& md) { return bytes(&md.data, sizeof md.data); }
  std::string_view view() const;
};

/// What determines a convolution primitive: the pass, the data's dtype and
/// the dtype the pass writes (`acc`: f32 for the bands' partial sums), the
/// shapes and the parameters.
std::string_view cache_key(const char* pass, DType t, DType acc, const Shape& input,
                           const Shape& weight, bool bias, const ConvParams& p);

/// A primitive's arguments, held in place: oneDNN's C++ execute() takes an
/// unordered_map and copies it into a vector, three allocations and more on
/// every call. This keeps the memories alive (a temporary may be passed) and
/// runs the primitive through oneDNN's C entry point.
class ExecArgs {
 public:
  ExecArgs& add(int arg, dnnl::memory m);
  /// Runs `prim` on this thread's stream with these arguments.
  void run(const dnnl::primitive& prim) const;

 private:
  static constexpr std::size_t kMax = 8;  // a convolution takes at most 5
  std::array<dnnl::memory, kMax> memories_{};
  std::array<dnnl_exec_arg_t, kMax> args_{};
  std::size_t n_ = 0;
};

/// A small LRU of prepared primitives (plus their operands): creating a oneDNN
/// convolution JIT-compiles code, far too slow to repeat on every call. Looked
/// up by a PlanKey's view: a hit copies nothing.
template <typename Plan>
class PlanCache {
 public:
  explicit PlanCache(std::size_t capacity = 128) : capacity_(capacity) {}

  template <typename Make>
  std::shared_ptr<const Plan> get(std::string_view key, Make&& make) {
    {
      std::lock_guard lock(mu_);
      auto it = index_.find(key);
      if (it != index_.end()) {
        order_.splice(order_.begin(), order_, it->second);
        return it->second->second;
      }
    }
    std::string owned(key);  // before make(): making a plan may build other keys
    // Built outside the lock: creation can take milliseconds. Two threads may
    // race to build the same plan; the second one's insert wins, harmlessly.
    auto plan = std::make_shared<const Plan>(make());
    std::lock_guard lock(mu_);
    if (auto it = index_.find(owned); it != index_.end()) {
      order_.erase(it->second);
      index_.erase(it);
    }
    order_.emplace_front(owned, plan);
    index_.emplace(std::move(owned), order_.begin());
    if (order_.size() > capacity_) {
      index_.erase(order_.back().first);
      order_.pop_back();
    }
    return plan;
  }

 private:
  // Finds a std::string key by a string_view without making a string of it.
  struct KeyHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  using Entry = std::pair<std::string, std::shared_ptr<const Plan>>;
  std::size_t capacity_;
  std::mutex mu_;
  std::list<Entry> order_;
  std::unordered_map<std::string, typename std::list<Entry>::iterator, KeyHash, std::equal_to<>>
      index_;
};

/// Turns a oneDNN error raised while creating a primitive into NotSupported
/// naming the pass, dtype and shapes (e.g. bf16 on a CPU without bf16 support).
[[noreturn]] void rethrow_unsupported(const dnnl::error& e, const std::string& what);

/// The implementation oneDNN chose ("jit:avx512_core", "ref:any", ...), for logs.
std::string impl_name(const dnnl::primitive_desc_base& pd);

}  // namespace dtensor::onednn
