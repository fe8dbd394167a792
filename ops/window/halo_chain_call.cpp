#include "ops/window/halo_chain_call.h"

#include <optional>
#include <string>

#include "dtensor/core/errors.h"

namespace dtensor {
namespace {

constexpr PaddingMode kModes[] = {PaddingMode::Zeros, PaddingMode::Reflect, PaddingMode::Replicate,
                                  PaddingMode::Circular};

// A convolution's kind names its padding mode: "conv" pads with zeros,
// "conv_reflect", "conv_replicate" and "conv_circular" as they say.
std::string conv_kind(PaddingMode mode) {
  return mode == PaddingMode::Zeros ? "conv" : "conv_" + std::string(padding_mode_name(mode));
}

std::optional<PaddingMode> conv_mode(const std::string& kind) {
  for (const PaddingMode m : kModes)
    if (kind == conv_kind(m)) return m;
  return std::nullopt;
}

// Spatial dims are 1 to 3: an upsample spells out three scale factors.
constexpr std::size_t kMaxUpsampleScales = 3;

const DTensor* pointer(const std::optional<DTensor>& t) {
  return t ? &*t : nullptr;
}

// Fills a layer's arguments up to the codec's width with None.
void pad_to_width(std::vector<OpArg>& out, std::size_t begin) {
  while (out.size() < begin + ArgCodec<ChainLayer>::width)
    out.emplace_back(None{});
}

}  // namespace

void ArgCodec<ChainLayer>::encode(std::vector<OpArg>& out, const ChainLayer& layer) {
  const std::size_t begin = out.size();
  encode_fields(out, layer);
  pad_to_width(out, begin);
}

void ArgCodec<ChainLayer>::encode_fields(std::vector<OpArg>& out, const ChainLayer& layer) {
  if (const auto* c = std::get_if<ChainConv>(&layer)) {
    const ConvParams p = c->params.expanded(c->weight.ndim() - 2);
    out.emplace_back(conv_kind(p.padding_mode));
    out.emplace_back(c->weight);
    ArgCodec<const DTensor*>::encode(out, pointer(c->bias));
    ArgCodec<ConvParams::Padding>::encode(out, p.padding);
    out.emplace_back(IntList(p.dilation));
    out.emplace_back(p.groups);
    out.emplace_back(IntList(p.stride));
    return;
  }
  if (const auto* a = std::get_if<ChainActivation>(&layer)) {
    out.emplace_back(std::string("activation"));
    out.emplace_back(a->op);
    out.emplace_back(a->negative_slope);
    out.emplace_back(std::string(gelu_approximate_name(a->approximate)));
    return;
  }
  if (const auto* pool = std::get_if<ChainPool>(&layer)) {
    out.emplace_back(std::string(pool->average ? "avg_pool" : "max_pool"));
    out.emplace_back(IntList(pool->params.kernel));
    ArgCodec<ConvParams::Padding>::encode(out, pool->params.padding);
    out.emplace_back(IntList(pool->params.dilation));
    out.emplace_back(pool->params.count_include_pad);
    ArgCodec<std::optional<std::int64_t>>::encode(out, pool->params.divisor_override);
    out.emplace_back(IntList(pool->params.stride));
    out.emplace_back(pool->params.ceil_mode);
    return;
  }
  if (const auto* t = std::get_if<ChainConvTranspose>(&layer)) {
    const ConvTransposeParams p = t->params.expanded(t->weight.ndim() - 2);
    out.emplace_back(std::string("conv_transpose"));
    out.emplace_back(t->weight);
    ArgCodec<const DTensor*>::encode(out, pointer(t->bias));
    for (const auto* list : {&p.stride, &p.padding, &p.output_padding, &p.dilation})
      out.emplace_back(IntList(*list));
    out.emplace_back(p.groups);
    return;
  }
  if (const auto* u = std::get_if<ChainUpsample>(&layer)) {
    const UpsampleParams& p = u->params;
    DTENSOR_CHECK_ARG(p.scale_factor.size() <= kMaxUpsampleScales, halo::kForwardOp,
                      "an upsample's scale_factor: at most {} values, got {}", kMaxUpsampleScales,
                      p.scale_factor.size());
    out.emplace_back(std::string("upsample"));
    out.emplace_back(std::string(upsample_mode_name(p.mode)));
    out.emplace_back(IntList(p.size));
    out.emplace_back(p.align_corners);
    out.emplace_back(static_cast<std::int64_t>(p.scale_factor.size()));
    for (std::size_t i = 0; i < kMaxUpsampleScales; ++i)
      out.emplace_back(i < p.scale_factor.size() ? p.scale_factor[i] : 0.0);
    return;
  }
  if (const auto* b = std::get_if<ChainBatchNorm>(&layer)) {
    out.emplace_back(std::string("batch_norm"));
    for (const auto* t : {&b->weight, &b->bias, &b->running_mean, &b->running_var})
      ArgCodec<const DTensor*>::encode(out, pointer(*t));
    out.emplace_back(b->training);
    out.emplace_back(b->momentum);
    out.emplace_back(b->eps);
    out.emplace_back(b->relu);
    return;
  }
  const auto& n = std::get<ChainGroupNorm>(layer);
  out.emplace_back(std::string("group_norm"));
  out.emplace_back(n.num_groups);
  out.emplace_back(n.eps);
  ArgCodec<const DTensor*>::encode(out, pointer(n.weight));
  ArgCodec<const DTensor*>::encode(out, pointer(n.bias));
  out.emplace_back(n.relu);
}

ChainLayer ArgCodec<ChainLayer>::decode(const OpSchema& s, std::size_t at, std::string_view field) {
  const std::string& kind = detail::call_arg<std::string>(
      s, at, field,
      "a layer kind (\"conv\", \"conv_reflect\", ..., \"group_norm\", \"batch_norm\", "
      "\"activation\", "
      "\"max_pool\", \"avg_pool\", \"upsample\" or \"conv_transpose\")");
  auto optional = [&](std::size_t i, std::string_view name) {
    const DTensor* t = ArgCodec<const DTensor*>::decode(s, i, name);
    return t ? std::optional<DTensor>(*t) : std::nullopt;
  };
  if (const std::optional<PaddingMode> mode = conv_mode(kind)) {
    ChainConv c{ArgCodec<const DTensor&>::decode(s, at + 1, "a convolution's weight"),
                optional(at + 2, "a convolution's bias"), ConvParams{}};
    c.params.padding_mode = *mode;
    c.params.padding = ArgCodec<ConvParams::Padding>::decode(s, at + 3, "a convolution's padding");
    c.params.dilation = ArgCodec<IntList>::decode(s, at + 4, "a convolution's dilation");
    c.params.groups = ArgCodec<std::int64_t>::decode(s, at + 5, "a convolution's groups");
    c.params.stride = ArgCodec<IntList>::decode(s, at + 6, "a convolution's stride");
    const auto spatial = static_cast<std::size_t>(std::max<std::int64_t>(c.weight.ndim() - 2, 0));
    DTENSOR_CHECK_ARG(c.params.padding.size() == spatial && c.params.dilation.size() == spatial &&
                          c.params.stride.size() == spatial,
                      "dispatch",
                      "{}: {}: a convolution's padding, dilation and stride need one entry per "
                      "spatial dim of its weight {}",
                      s.op(), field, shape_str(c.weight.shape()));
    return c;
  }
  if (kind == "activation") {
    ChainActivation a;
    a.op = detail::call_arg<std::string>(s, at + 1, field, "an activation's operator name");
    a.negative_slope = ArgCodec<double>::decode(s, at + 2, "an activation's negative_slope");
    const std::string& approximate =
        detail::call_arg<std::string>(s, at + 3, field, "an activation's approximate");
    DTENSOR_CHECK_ARG(approximate == "none" || approximate == "tanh", "dispatch",
                      "{}: {}: approximate: \"none\" or \"tanh\" expected, got \"{}\"", s.op(),
                      field, approximate);
    a.approximate = approximate == "tanh" ? GeluApproximate::Tanh : GeluApproximate::None;
    return a;
  }
  if (kind == "max_pool" || kind == "avg_pool") {
    ChainPool pool;
    pool.average = kind == "avg_pool";
    PoolParams& p = pool.params;
    p.kernel = ArgCodec<IntList>::decode(s, at + 1, "a pool's kernel");
    p.padding = ArgCodec<ConvParams::Padding>::decode(s, at + 2, "a pool's padding");
    p.dilation = ArgCodec<IntList>::decode(s, at + 3, "a pool's dilation");
    p.count_include_pad = ArgCodec<bool>::decode(s, at + 4, "a pool's count_include_pad");
    p.divisor_override =
        ArgCodec<std::optional<std::int64_t>>::decode(s, at + 5, "a pool's divisor_override");
    p.stride = ArgCodec<IntList>::decode(s, at + 6, "a pool's stride");
    p.ceil_mode = ArgCodec<bool>::decode(s, at + 7, "a pool's ceil_mode");
    DTENSOR_CHECK_ARG(p.padding.size() == p.kernel.size() && p.dilation.size() == p.kernel.size() &&
                          p.stride.size() == p.kernel.size(),
                      "dispatch",
                      "{}: {}: a pool's kernel, padding, dilation and stride need one entry per "
                      "spatial dim each, got {}, {}, {} and {}",
                      s.op(), field, p.kernel.size(), p.padding.size(), p.dilation.size(),
                      p.stride.size());
    return pool;
  }
  if (kind == "conv_transpose") {
    ChainConvTranspose t{
        ArgCodec<const DTensor&>::decode(s, at + 1, "a transposed convolution's weight"),
        optional(at + 2, "a transposed convolution's bias"), ConvTransposeParams{}};
    ConvTransposeParams& p = t.params;
    p.stride = ArgCodec<IntList>::decode(s, at + 3, "a transposed convolution's stride");
    p.padding = ArgCodec<IntList>::decode(s, at + 4, "a transposed convolution's padding");
    p.output_padding =
        ArgCodec<IntList>::decode(s, at + 5, "a transposed convolution's output_padding");
    p.dilation = ArgCodec<IntList>::decode(s, at + 6, "a transposed convolution's dilation");
    p.groups = ArgCodec<std::int64_t>::decode(s, at + 7, "a transposed convolution's groups");
    const auto spatial = static_cast<std::size_t>(std::max<std::int64_t>(t.weight.ndim() - 2, 0));
    DTENSOR_CHECK_ARG(p.stride.size() == spatial && p.padding.size() == spatial &&
                          p.output_padding.size() == spatial && p.dilation.size() == spatial,
                      "dispatch",
                      "{}: {}: a transposed convolution's stride, padding, output_padding and "
                      "dilation need one entry per spatial dim of its weight {}",
                      s.op(), field, shape_str(t.weight.shape()));
    return t;
  }
  if (kind == "upsample") {
    ChainUpsample u;
    const std::string& mode = detail::call_arg<std::string>(s, at + 1, field, "an upsample's mode");
    DTENSOR_CHECK_ARG(mode == "nearest" || mode == "linear", "dispatch",
                      "{}: {}: an upsample's mode: \"nearest\" or \"linear\" expected, got \"{}\"",
                      s.op(), field, mode);
    u.params.mode = mode == "linear" ? UpsampleMode::Linear : UpsampleMode::Nearest;
    u.params.size = ArgCodec<IntList>::decode(s, at + 2, "an upsample's size");
    u.params.align_corners = ArgCodec<bool>::decode(s, at + 3, "an upsample's align_corners");
    const std::int64_t scales =
        ArgCodec<std::int64_t>::decode(s, at + 4, "an upsample's number of scale factors");
    DTENSOR_CHECK_ARG(scales >= 0 && scales <= static_cast<std::int64_t>(kMaxUpsampleScales),
                      "dispatch", "{}: {}: an upsample's number of scale factors: 0 to {}, got {}",
                      s.op(), field, kMaxUpsampleScales, scales);
    for (std::int64_t i = 0; i < scales; ++i)
      u.params.scale_factor.push_back(ArgCodec<double>::decode(
          s, at + 5 + static_cast<std::size_t>(i), "an upsample's scale factor"));
    return u;
  }
  if (kind == "batch_norm") {
    ChainBatchNorm b;
    b.weight = optional(at + 1, "a batch norm's weight");
    b.bias = optional(at + 2, "a batch norm's bias");
    b.running_mean = optional(at + 3, "a batch norm's running_mean");
    b.running_var = optional(at + 4, "a batch norm's running_var");
    b.training = ArgCodec<bool>::decode(s, at + 5, "a batch norm's training");
    b.momentum = ArgCodec<double>::decode(s, at + 6, "a batch norm's momentum");
    b.eps = ArgCodec<double>::decode(s, at + 7, "a batch norm's eps");
    b.relu = ArgCodec<bool>::decode(s, at + 8, "a batch norm's relu");
    return b;
  }
  DTENSOR_CHECK_ARG(kind == "group_norm", "dispatch", "{}: {}: unknown layer kind '{}'", s.op(),
                    field, kind);
  ChainGroupNorm n;
  n.num_groups = ArgCodec<std::int64_t>::decode(s, at + 1, "a group norm's num_groups");
  n.eps = ArgCodec<double>::decode(s, at + 2, "a group norm's eps");
  n.weight = optional(at + 3, "a group norm's weight");
  n.bias = optional(at + 4, "a group norm's bias");
  n.relu = ArgCodec<bool>::decode(s, at + 5, "a group norm's relu");
  return n;
}

}  // namespace dtensor
