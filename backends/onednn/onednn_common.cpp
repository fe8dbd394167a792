#include "backends/onednn/onednn_common.h"

#include <fmt/format.h>

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
    case DType::F16:  // not on the CPUs oneDNN 2.6 targets here: f16_conv.cpp widens to f32
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
}  // namespace

ScratchScope::ScratchScope() {
  t_scratch.emplace_back();
}
ScratchScope::~ScratchScope() {
  t_scratch.pop_back();
}

dnnl::memory ScratchScope::memory(const dnnl::memory::desc& md) {
  auto st = Storage::allocate(md.get_size(), Device::cpu());
  void* p = st->data();
  t_scratch.back().push_back(std::move(st));
  return dnnl::memory(md, engine(), p);
}

Operand::Operand(const dnnl::memory::desc& user, const dnnl::memory::desc& prim, bool is_input)
    : user_(user), prim_(prim), same_(user == prim) {
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
  reorder_.execute(stream(), user, m);
  return m;
}

dnnl::memory Operand::output(const Tensor& t) const {
  if (same_) return dnnl::memory(user_, engine(), t.data_ptr());
  return ScratchScope::memory(prim_);
}

void Operand::finish_output(dnnl::memory written, const Tensor& t) const {
  if (same_) return;
  dnnl::memory user(user_, engine(), t.data_ptr());
  reorder_.execute(stream(), written, user);
}

std::string cache_key(const char* pass, DType t, const Shape& input, const Shape& weight, bool bias,
                      const ConvParams& p) {
  return fmt::format("{}|{}|x{}|w{}|{}|{}", pass, dtype_name(t), shape_str(input),
                     shape_str(weight), bias ? "bias" : "nobias", p.str());
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
