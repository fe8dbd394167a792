#include "backends/onednn/onednn_common.h"

#include <algorithm>

#include <fmt/format.h>

#include "backends/onednn/channel_block_copy.h"
#include "backends/onednn/scratch_arena.h"
#include "dtensor/core/errors.h"
#include "dtensor/core/logging.h"

namespace dtensor::onednn {

using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

const dnnl::engine& engine() {
  static const dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  return eng;
}

dnnl::stream& stream() {
  thread_local dnnl::stream s(engine());
  return s;
}

dnnl::memory::data_type data_type(DType t) {
  switch (t) {
    case DType::F32:
      return dt::f32;
    case DType::BF16:
      return dt::bf16;
    case DType::F64:
    case DType::F16:  // none in oneDNN 2.6 without AVX512-FP16: f16_conv.cpp widens to f32
    case DType::I64:  // no integer convolution
      break;
  }
  throw NotSupported("onednn", fmt::format("oneDNN has no {} convolution", dtype_name(t)));
}

ConvDims::ConvDims(const Shape& input, const Shape& weight, const ConvParams& p) {
  const std::size_t nsp = input.size() - 2;
  src = input;
  bias = {weight[0]};
  dst = {input[0], weight[0]};
  for (std::size_t i = 0; i < nsp; ++i) {
    dst.push_back(conv_output_length(input[2 + i], weight[2 + i], p.stride[i], p.dilation[i],
                                     p.padding[i].first, p.padding[i].second));
    strides.push_back(p.stride[i]);
    dilates.push_back(p.dilation[i] - 1);  // oneDNN counts the gaps between taps
    padding_l.push_back(p.padding[i].first);
    padding_r.push_back(p.padding[i].second);
  }
  static constexpr tag src_tags[] = {tag::ncw, tag::nchw, tag::ncdhw};
  static constexpr tag w_tags[] = {tag::oiw, tag::oihw, tag::oidhw};
  static constexpr tag gw_tags[] = {tag::goiw, tag::goihw, tag::goidhw};
  src_tag = src_tags[nsp - 1];
  if (p.groups == 1) {
    weights = weight;
    weights_tag = w_tags[nsp - 1];
  } else {
    // [OC, C/g, k...] is, byte for byte, [g, OC/g, C/g, k...]: the grouped
    // layout is a view of the user's weight, no copy.
    weights = {p.groups, weight[0] / p.groups};
    weights.insert(weights.end(), weight.begin() + 1, weight.end());
    weights_tag = gw_tags[nsp - 1];
  }
}

dnnl::memory::desc plain_md(const dnnl::memory::dims& dims, DType t, tag format) {
  return dnnl::memory::desc(dims, data_type(t), format);
}

dnnl::memory::desc any_md(const dnnl::memory::dims& dims, DType t) {
  return dnnl::memory::desc(dims, data_type(t), tag::any);
}

namespace {
thread_local std::vector<std::vector<std::shared_ptr<Storage>>> t_scratch;
thread_local std::vector<std::vector<Tensor>> t_kept;
thread_local std::vector<ScratchArena::Mark> t_marks;

// Whether a tile of `md` can be addressed as a sub-memory: a blocked (or
// plain) layout, whose padded dims equal its dims when it is an input
// (channel padding must read as zeros, and tiles never cover it). A
// primitive writes its outputs' padding itself, and tiles are only read out.
bool sub_memories_work(const dnnl::memory::desc& md, bool is_input) {
  if (md.data.format_kind != dnnl_blocked) return false;
  if (!is_input) return true;
  for (int i = 0; i < md.data.ndims; ++i)
    if (md.data.padded_dims[i] != md.data.dims[i]) return false;
  return true;
}

PlanCache<dnnl::reorder>& tile_reorders() {
  static PlanCache<dnnl::reorder> c(512);
  return c;
}

}  // namespace

ScratchScope::ScratchScope() {
  t_scratch.emplace_back();
  t_kept.emplace_back();
  t_marks.push_back(ScratchArena::for_this_thread().mark());
}
ScratchScope::~ScratchScope() {
  t_scratch.pop_back();
  t_kept.pop_back();
  ScratchArena::for_this_thread().release(t_marks.back());
  t_marks.pop_back();
}

void ScratchScope::keep(const Tensor& t) {
  t_kept.back().push_back(t);
}

void* ScratchScope::bytes(std::size_t n) {
  if (n < ScratchArena::kMaxRequest) return ScratchArena::for_this_thread().take(n);
  auto st = Storage::allocate(n, Device::cpu());
  void* p = st->data();
  t_scratch.back().push_back(std::move(st));
  return p;
}

BandBuffer::BandBuffer(const std::vector<dnnl::memory::desc>& descs) {
  std::size_t n = 0;
  for (const auto& d : descs)
    n = std::max(n, d.get_size());
  data_ = ScratchScope::bytes(n);
}

dnnl::memory BandBuffer::view(const dnnl::memory::desc& md) const {
  return dnnl::memory(md, engine(), data_);
}

dnnl::memory ScratchScope::memory(const dnnl::memory::desc& md) {
  return dnnl::memory(md, engine(), bytes(md.get_size()));
}

Operand::Operand(const dnnl::memory::desc& user, const dnnl::memory::desc& prim, bool is_input)
    : user_(user), prim_(prim), same_(user == prim), tileable_(sub_memories_work(prim, is_input)) {
  if (same_) return;
  reorder_ = is_input
                 ? dnnl::reorder(dnnl::reorder::primitive_desc(engine(), user, engine(), prim))
                 : dnnl::reorder(dnnl::reorder::primitive_desc(engine(), prim, engine(), user));
}

dnnl::memory Operand::input(const Tensor& t) const {
  // oneDNN only reads inputs; the const_cast is what its C-style API needs.
  dnnl::memory user(user_, engine(), const_cast<void*>(t.data_ptr()));
  if (same_) return user;
  dnnl::memory m = ScratchScope::memory(prim_);
  if (!copy_channel_blocked(t, prim_, m.get_data_handle(), true))
    ExecArgs().add(DNNL_ARG_FROM, user).add(DNNL_ARG_TO, m).run(reorder_);
  return m;
}

dnnl::memory Operand::output(const Tensor& t) const {
  if (same_) return dnnl::memory(user_, engine(), t.data_ptr());
  return ScratchScope::memory(prim_);
}

void Operand::finish_output(dnnl::memory written, const Tensor& t) const {
  if (same_) return;
  if (copy_channel_blocked(t, prim_, written.get_data_handle(), false)) return;
  dnnl::memory user(user_, engine(), t.data_ptr());
  ExecArgs().add(DNNL_ARG_FROM, written).add(DNNL_ARG_TO, user).run(reorder_);
}

void Operand::reorder_region(const Tensor& view, const Shape& offset, const dnnl::memory& whole,
                             bool into, bool accumulate) const {
  if (view.numel() == 0) return;
  // A Shape is a dnnl::memory::dims (both std::vector<std::int64_t>): no copies.
  // The view keeps its own dtype: a reorder also converts (f32 sums of bf16 data).
  const dnnl::memory::desc plain(view.shape(), data_type(view.dtype()), view.strides());
  const dnnl::memory::desc sub = prim_.submemory_desc(view.shape(), offset);
  if (!accumulate && copy_channel_blocked(view, sub, whole.get_data_handle(), into)) return;
  const dnnl::memory::desc& from = into ? plain : sub;
  const dnnl::memory::desc& to = into ? sub : plain;
  const auto r =
      tile_reorders().get(PlanKey(accumulate ? "+" : "=").desc(from).desc(to).view(), [&] {
        dnnl::primitive_attr attr;
        if (accumulate) {
          dnnl::post_ops ops;
          ops.append_sum(1.0f);
          attr.set_post_ops(ops);
        }
        return dnnl::reorder(dnnl::reorder::primitive_desc(engine(), from, engine(), to, attr));
      });
  const dnnl::memory view_mem(plain, engine(), view.data_ptr());
  const dnnl::memory sub_mem(sub, engine(), whole.get_data_handle());
  ExecArgs()
      .add(DNNL_ARG_FROM, into ? view_mem : sub_mem)
      .add(DNNL_ARG_TO, into ? sub_mem : view_mem)
      .run(*r);
}

dnnl::memory Operand::input(const TiledTensor& t) const {
  if (!tileable_ || t.is_whole()) {
    const Tensor whole = t.assemble().contiguous();
    ScratchScope::keep(whole);
    return input(whole);
  }
  dnnl::memory m = ScratchScope::memory(prim_);
  for (const auto& tile : t.tiles())
    reorder_region(tile.data, tile.offset, m, true);
  return m;
}

dnnl::memory Operand::output(const TiledTensor& t, Tensor& temp) const {
  if (t.is_whole() && t.tiles()[0].data.is_contiguous()) {
    temp = t.tiles()[0].data;  // an ordinary tensor: written as one
    return output(temp);
  }
  if (tileable_) return ScratchScope::memory(prim_);
  temp = Tensor::empty(t.shape(), t.dtype(), t.device());
  return output(temp);
}

void Operand::finish_output(dnnl::memory written, const TiledTensor& t, const Tensor& temp) const {
  if (temp.defined()) {
    finish_output(written, temp);
    if (!t.is_whole() || temp.data_ptr() != t.tiles()[0].data.data_ptr()) t.scatter(temp);
    return;
  }
  for (const auto& tile : t.tiles())
    reorder_region(tile.data, tile.offset, written, false);
}

dnnl::memory ReusedInput::get(const Operand& op) {
  if (!mem_ || desc_ != op.primitive_desc()) {
    mem_ = op.input(t_);
    desc_ = op.primitive_desc();
  }
  return mem_;
}

namespace {
thread_local std::string t_key;
}  // namespace

PlanKey::PlanKey(std::string_view pass) {
  t_key.assign(pass);
}

PlanKey& PlanKey::bytes(const void* p, std::size_t n) {
  t_key.append(static_cast<const char*>(p), n);
  return *this;
}

PlanKey& PlanKey::put_list(const std::vector<std::int64_t>& v) {
  put(static_cast<std::int64_t>(v.size()));
  return bytes(v.data(), v.size() * sizeof(std::int64_t));
}

std::string_view PlanKey::view() const {
  return t_key;
}

std::string_view cache_key(const char* pass, DType t, DType acc, const Shape& input,
                           const Shape& weight, bool bias, const ConvParams& p) {
  PlanKey key(pass);
  key.put(static_cast<std::int64_t>(t))
      .put(static_cast<std::int64_t>(acc))
      .put(bias ? 1 : 0)
      .put_list(input)
      .put_list(weight)
      .put_list(p.stride)
      .put_list(p.dilation)
      .put(static_cast<std::int64_t>(p.padding.size()));
  for (const auto& [lo, hi] : p.padding)
    key.put(lo).put(hi);
  return key.put(p.groups).put(static_cast<std::int64_t>(p.padding_mode)).view();
}

ExecArgs& ExecArgs::add(int arg, dnnl::memory m) {
  if (n_ == kMax) throw Error("onednn", "internal: more than 8 arguments to one primitive");
  args_[n_] = {arg, m.get()};
  memories_[n_++] = std::move(m);
  return *this;
}

void ExecArgs::run(const dnnl::primitive& prim) const {
  dnnl::error::wrap_c_api(
      dnnl_primitive_execute(prim.get(), stream().get(), static_cast<int>(n_), args_.data()),
      "could not execute a primitive");
}

bool runs_bf16() {
  static const bool runs = [] {
    const dnnl::memory::desc md({1}, dnnl::memory::data_type::bf16, dnnl::memory::format_tag::x);
    try {
      // Creating the descriptor is the question; it is not used.
      const dnnl::eltwise_forward::primitive_desc asked(
          {dnnl::prop_kind::forward_training, dnnl::algorithm::eltwise_relu, md, 0.0f, 0.0f},
          engine());
      return static_cast<bool>(asked);
    } catch (const dnnl::error& e) {
      if (e.status == dnnl_unimplemented) return false;
      throw;
    }
  }();
  return runs;
}

void rethrow_unsupported(const dnnl::error& e, const std::string& what) {
  if (e.status == dnnl_unimplemented)
    throw NotSupported("onednn",
                       fmt::format("{}: oneDNN {}.{} has no implementation for it on "
                                   "this CPU ({})",
                                   what, DNNL_VERSION_MAJOR, DNNL_VERSION_MINOR, e.what()));
  throw Error("onednn",
              fmt::format("{}: {} (status {})", what, e.what(), static_cast<int>(e.status)));
}

std::string impl_name(const dnnl::primitive_desc_base& pd) {
  return pd.impl_info_str();
}

}  // namespace dtensor::onednn
