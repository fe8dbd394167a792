// The U-Net operator oracles (tools/reference/reference_nn_ops.h) on small
// cases whose answers are derived by hand in the comments, from PyTorch's
// definitions. dtensor-op --check trusts these oracles, so they are pinned
// here independently of both the library and PyTorch.
#include <catch2/catch.hpp>

#include <cmath>
#include <initializer_list>
#include <vector>

#include "tools/reference/reference_nn_ops.h"

using namespace dtensor;
using namespace dtensor::reference;

namespace {

Tensor of_shape(const Shape& shape, std::initializer_list<double> values) {
  Tensor t = Tensor::zeros(shape, DType::F64);
  REQUIRE(static_cast<std::int64_t>(values.size()) == t.numel());
  std::int64_t i = 0;
  for (double v : values)
    t.data<double>()[i++] = v;
  return t;
}

void check_values(const Tensor& got, std::initializer_list<double> want) {
  const Tensor c = got.to(DType::F64);
  REQUIRE(static_cast<std::size_t>(c.numel()) == want.size());
  std::size_t i = 0;
  for (double w : want) {
    INFO("element " << i << ": got " << c.data<double>()[i] << ", want " << w);
    CHECK(c.data<double>()[i] == Approx(w).margin(1e-12));
    ++i;
  }
}

RefUpsample by_size(bool linear, std::vector<std::int64_t> size, bool align = false) {
  RefUpsample p;
  p.linear = linear;
  p.size = std::move(size);
  p.align_corners = align;
  return p;
}

RefUpsample by_scale(bool linear, std::vector<double> scale, bool align = false) {
  RefUpsample p;
  p.linear = linear;
  p.scale_factor = std::move(scale);
  p.align_corners = align;
  return p;
}

RefNorm norm(RefNormKind kind, double eps = 0.0, bool training = true, std::int64_t groups = 1) {
  RefNorm p;
  p.kind = kind;
  p.eps = eps;
  p.training = training;
  p.num_groups = groups;
  return p;
}

}  // namespace

TEST_CASE("reference upsample nearest: floorf(o * scale), PyTorch's backward special cases",
          "[reference][nn]") {
  const Tensor x = of_shape({1, 1, 3}, {1, 2, 3});
  // L = 3, O = 5: scale = 0.6f, src = floor(0, .6, 1.2, 1.8, 2.4) = 0 0 1 1 2.
  const auto p = by_size(false, {5});
  CHECK(ref_upsample_output_shape(x.shape(), p) == Shape{1, 1, 5});
  check_values(ref_upsample_forward(x, p), {1, 1, 2, 2, 3});
  // Each input receives the gradients of the outputs that copied it.
  check_values(
      ref_upsample_grad_input(of_shape({1, 1, 5}, {1, 10, 100, 1000, 10000}), x.shape(), p),
      {11, 1100, 10000});
  // O == 2L: o >> 1.
  check_values(ref_upsample_forward(of_shape({1, 1, 2}, {4, 5}), by_scale(false, {2.0})),
               {4, 4, 5, 5});
  // scale 1.5 on L = 3: O = 4, src = floor(o / 1.5) = 0 0 1 2.
  check_values(ref_upsample_forward(x, by_scale(false, {1.5})), {1, 1, 2, 3});
  // scale 2.1 on L = 4: O = 8 = 2L. PyTorch's forward: floorf(o / 2.1) = 0 0 0 1 1 2 2 3;
  // its backward (nearest_idx) takes o >> 1 instead.
  const Tensor x4 = of_shape({1, 1, 4}, {1, 2, 3, 4});
  check_values(ref_upsample_forward(x4, by_scale(false, {2.1})), {1, 1, 1, 2, 2, 3, 3, 4});
  check_values(ref_upsample_grad_input(of_shape({1, 1, 8}, {1, 10, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7}),
                                       x4.shape(), by_scale(false, {2.1})),
               {11, 1.1e3, 1.1e5, 1.1e7});
  // scale 1.1 on L = 5: O = 5 = L. Forward floorf(o / 1.1) = 0 0 1 2 3; backward a copy.
  const Tensor x5 = of_shape({1, 1, 5}, {1, 2, 3, 4, 5});
  check_values(ref_upsample_forward(x5, by_scale(false, {1.1})), {1, 1, 2, 3, 4});
  check_values(ref_upsample_grad_input(x5, x5.shape(), by_scale(false, {1.1})), {1, 2, 3, 4, 5});
}

TEST_CASE("reference upsample linear: half-pixel and align_corners sources", "[reference][nn]") {
  const Tensor x = of_shape({1, 1, 2}, {0, 2});
  // L = 2, O = 4, scale 0.5: src = max((o + .5) / 2 - .5, 0) = 0, .25, .75, 1.25 (i0 = 1 = L-1,
  // both taps on element 1) -> 0, .5, 1.5, 2.
  const auto p = by_size(true, {4});
  check_values(ref_upsample_forward(x, p), {0, 0.5, 1.5, 2});
  // Ones back: element 0 gets 1 + .75 + .25 + 0, element 1 the rest.
  check_values(ref_upsample_grad_input(of_shape({1, 1, 4}, {1, 1, 1, 1}), x.shape(), p), {2, 2});
  // align_corners, O = 3: src = o * (L-1)/(O-1) = 0, .5, 1.
  check_values(ref_upsample_forward(x, by_size(true, {3}, true)), {0, 1, 2});
  // A scale factor is used as given: L = 4, scale 0.5 -> O = 2, src = (o + .5) * 2 - .5.
  check_values(ref_upsample_forward(of_shape({1, 1, 4}, {0, 1, 2, 3}), by_scale(true, {0.5})),
               {0.5, 2.5});
  // Bilinear with align_corners: the 2x2 corners spread over 3x3.
  const Tensor x2 = of_shape({1, 1, 2, 2}, {0, 1, 2, 3});
  check_values(ref_upsample_forward(x2, by_size(true, {3}, true)),
               {0, 0.5, 1, 1, 1.5, 2, 2, 2.5, 3});
}

TEST_CASE("reference batch_norm: batch statistics, running update, eval", "[reference][nn]") {
  // x [2, 1] = 1, 3: mean 2, biased var 1 (unbiased 2); eps 0 -> xhat -1, 1.
  const Tensor x = of_shape({2, 1}, {1, 3});
  RefNorm p = norm(RefNormKind::Batch);
  p.momentum = 0.1;
  const auto f = ref_norm_forward(x, of_shape({1}, {2}), of_shape({1}, {1}), of_shape({1}, {0}),
                                  of_shape({1}, {1}), p);
  check_values(f.output, {-1, 3});      // xhat * 2 + 1
  check_values(f.running_mean, {0.2});  // 0.9 * 0 + 0.1 * 2
  check_values(f.running_var, {1.1});   // 0.9 * 1 + 0.1 * 2
  CHECK(f.max_invstd == Approx(1.0));

  // Eval: running mean 1, var 4 -> y = (x - 1) / 2; the gradient is g / 2.
  const RefNorm e = norm(RefNormKind::Batch, 0.0, false);
  const auto fe =
      ref_norm_forward(x, Tensor(), Tensor(), of_shape({1}, {1}), of_shape({1}, {4}), e);
  check_values(fe.output, {0, 1});
  check_values(fe.running_mean, {1});
  const auto ge = ref_norm_backward(of_shape({2, 1}, {1, 1}), x, Tensor(), of_shape({1}, {1}),
                                    of_shape({1}, {4}), e);
  check_values(ge.grad_input, {0.5, 0.5});
  check_values(ge.grad_weight, {1});  // sum gy * xhat = 0 + 1
  check_values(ge.grad_bias, {2});
}

TEST_CASE("reference norms: the statistics sets and the backward", "[reference][nn]") {
  // Three values 0, 1, 2 in one set: mean 1, var 2/3, invstd sqrt(1.5) = a, xhat = -a, 0, a.
  // gy = 1, 0, 0: mean(g) = 1/3, mean(g xhat) = -a/3, so
  // dx = a (g - 1/3 + xhat a / 3) = a (1/6, -1/3, 1/6) (a^2 = 1.5).
  const double a = std::sqrt(1.5);
  const Tensor gy = of_shape({1, 3}, {1, 0, 0});
  for (RefNormKind kind : {RefNormKind::Layer, RefNormKind::Group}) {
    const RefNorm p = norm(kind);
    const Tensor x = of_shape({1, 3}, {0, 1, 2});
    check_values(ref_norm_forward(x, Tensor(), Tensor(), Tensor(), Tensor(), p).output, {-a, 0, a});
    const auto g = ref_norm_backward(gy, x, Tensor(), Tensor(), Tensor(), p);
    check_values(g.grad_input, {a / 6, -a / 3, a / 6});
    check_values(g.grad_bias, {1, 0, 0});  // per channel (and per element for layer_norm)
  }
  // instance_norm over the spatial dim of [1, 1, 3]: the same numbers.
  const auto gi =
      ref_norm_backward(of_shape({1, 1, 3}, {1, 0, 0}), of_shape({1, 1, 3}, {0, 1, 2}),
                        of_shape({1}, {1}), Tensor(), Tensor(), norm(RefNormKind::Instance));
  check_values(gi.grad_input, {a / 6, -a / 3, a / 6});
  check_values(gi.grad_weight, {-a});  // sum gy * xhat

  // group_norm, 2 groups of 2 channels: {1, 3} -> -1, 1; {10, 14} -> -1, 1; then w, b per channel.
  const auto fg = ref_norm_forward(of_shape({1, 4}, {1, 3, 10, 14}), of_shape({4}, {1, 2, 3, 4}),
                                   of_shape({4}, {0, 0, 0, 1}), Tensor(), Tensor(),
                                   norm(RefNormKind::Group, 0.0, true, 2));
  check_values(fg.output, {-1, 2, -3, 5});
  CHECK(fg.max_invstd == Approx(1.0));  // var 1 and 4

  // layer_norm's parameters are [C, spatial...]: x [1, 2, 2] = 0, 2, 4, 6: mean 3, var 5.
  const RefNorm l = norm(RefNormKind::Layer);
  const Tensor xl = of_shape({1, 2, 2}, {0, 2, 4, 6});
  CHECK(ref_norm_param_shape(xl.shape(), l) == Shape{2, 2});
  CHECK(ref_norm_set_size(xl.shape(), l) == 4);
  const double r5 = std::sqrt(5.0);
  check_values(
      ref_norm_forward(xl, of_shape({2, 2}, {1, 0, 0, 1}), Tensor(), Tensor(), Tensor(), l).output,
      {-3 / r5, 0, 0, 3 / r5});
  const auto gl =
      ref_norm_backward(of_shape({1, 2, 2}, {1, 1, 1, 1}), xl, Tensor(), Tensor(), Tensor(), l);
  CHECK(gl.grad_weight.shape() == Shape{2, 2});
  check_values(gl.grad_weight, {-3 / r5, -1 / r5, 1 / r5, 3 / r5});
  check_values(gl.grad_input, {0, 0, 0, 0});  // a constant gradient through a normalisation
}

TEST_CASE("reference cat: concatenation and its split gradient", "[reference][nn]") {
  const Tensor a = of_shape({2, 2}, {1, 2, 3, 4}), b = of_shape({2, 1}, {5, 6});
  const Tensor y = ref_cat({a, b}, 1);
  CHECK(y.shape() == Shape{2, 3});
  check_values(y, {1, 2, 5, 3, 4, 6});
  check_values(ref_cat({a, a}, 0), {1, 2, 3, 4, 1, 2, 3, 4});
  check_values(ref_cat({a, b}, -1), {1, 2, 5, 3, 4, 6});
  const auto pieces = ref_cat_grad(y, {a.shape(), b.shape()}, 1);
  REQUIRE(pieces.size() == 2);
  check_values(pieces[0], {1, 2, 3, 4});
  check_values(pieces[1], {5, 6});
}

TEST_CASE("reference activations: values and derivatives", "[reference][nn]") {
  const Tensor x = of_shape({1, 3}, {-2, 0, 1});
  const Tensor ones = of_shape({1, 3}, {1, 1, 1});
  check_values(ref_activation_forward(x, RefActivation::Relu), {0, 0, 1});
  check_values(ref_activation_grad_input(ones, x, RefActivation::Relu), {0, 0, 1});
  check_values(ref_activation_forward(x, RefActivation::LeakyRelu, 0.1), {-0.2, 0, 1});
  // PyTorch: self > 0 ? grad : grad * slope (x = 0 takes the slope).
  check_values(ref_activation_grad_input(ones, x, RefActivation::LeakyRelu, 0.1), {0.1, 0.1, 1});
  // gelu(1) = Phi(1); gelu'(0) = 1/2; tanh approximation from PyTorch (float64).
  const Tensor one = of_shape({1, 1}, {1}), zero = of_shape({1, 1}, {0});
  const Tensor g1 = of_shape({1, 1}, {1});
  check_values(ref_activation_forward(one, RefActivation::Gelu), {0.841344746068543});
  check_values(ref_activation_grad_input(g1, zero, RefActivation::Gelu), {0.5});
  check_values(ref_activation_grad_input(g1, one, RefActivation::Gelu), {1.0833154705876864});
  check_values(ref_activation_forward(one, RefActivation::GeluTanh), {0.8411919906082768});
  check_values(ref_activation_grad_input(g1, one, RefActivation::GeluTanh), {1.0829640838457826});
  // sigmoid(ln 3) = 3/4, derivative 3/16; silu(0) = 0, silu'(0) = 1/2; tanh'(0) = 1.
  const Tensor ln3 = of_shape({1, 1}, {std::log(3.0)});
  check_values(ref_activation_forward(ln3, RefActivation::Sigmoid), {0.75});
  check_values(ref_activation_grad_input(g1, ln3, RefActivation::Sigmoid), {0.1875});
  check_values(ref_activation_forward(ln3, RefActivation::Silu), {0.75 * std::log(3.0)});
  check_values(ref_activation_grad_input(g1, zero, RefActivation::Silu), {0.5});
  check_values(ref_activation_grad_input(g1, zero, RefActivation::Tanh), {1});
  check_values(ref_activation_forward(ln3, RefActivation::Tanh), {0.8});  // (9-1)/(9+1)
}

TEST_CASE("reference losses: mse and cross_entropy with probabilities", "[reference][nn]") {
  const Tensor x = of_shape({1, 2}, {1, 2}), t = of_shape({1, 2}, {0, 0});
  const Tensor sum = ref_mse_loss(x, t, false);
  CHECK(sum.shape().empty());  // 0-d
  check_values(sum, {5});
  check_values(ref_mse_loss(x, t, true), {2.5});
  check_values(ref_mse_loss_grad_input(x, t, true), {1, 2});  // 2 (x - t) / 2
  check_values(ref_mse_loss_grad_input(x, t, false), {2, 4});

  // [N=1, C=2, 2 positions]: position 0 x = (0, ln 3) -> softmax (1/4, 3/4), t = (0, 1):
  // -ln(3/4); position 1 x = (0, 0), t = (1/2, 1/2): ln 2.
  const Tensor xc = of_shape({1, 2, 2}, {0, 0, std::log(3.0), 0});
  const Tensor tc = of_shape({1, 2, 2}, {0, 0.5, 1, 0.5});
  const double total = std::log(2.0) - std::log(0.75);
  check_values(ref_cross_entropy(xc, tc, false), {total});
  check_values(ref_cross_entropy(xc, tc, true), {total / 2});
  // (softmax - t) / 2: position 0 (1/4, -1/4), position 1 (0, 0); laid out [c][position].
  check_values(ref_cross_entropy_grad_input(xc, tc, true), {0.125, 0, -0.125, 0});
  check_values(ref_softmax_dim1(xc), {0.25, 0.5, 0.75, 0.5});
}
