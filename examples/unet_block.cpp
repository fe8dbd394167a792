// A spatially parallel U-Net block, forward and backward, with H and W
// sharded over a 2x2 mesh, checked against the same block on one process.
//
//   h = relu(group_norm(conv3x3(x)))            4 -> 8 channels, full size
//   p = max_pool(h, 2, stride 2)                   half size
//   q = relu(conv3x3(p))                        8 -> 16 channels
//   u = conv_transpose(q, 2x2, stride 2)        16 -> 8 channels, full size
//   y = conv1x1(cat([u, h], dim 1))             16 -> 4 channels
//   loss = mse_loss(y, target)
//
// Every operator runs on the sharded tensors with its halo exchanges; the
// backward pass walks the block in reverse with each operator's backward.
// Each rank also runs the block on a mesh of itself alone (the whole
// tensors, no communication): the one-process result. The program prints
// the loss and the largest relative difference of every gradient, and exits
// non-zero when one exceeds 1e-10 (f64).
//
//   dtensor-run -n 4 -- dtensor-example-unet-block
#include <cmath>
#include <cstdio>
#include <map>
#include <string>

#include <dtensor/dtensor.h>

using namespace dtensor;

namespace {

struct Params {
  DTensor w1, b1, g1, be1, w2, b2, wt, bt, w3, b3;
};

Params make_params(const DeviceMesh& mesh) {
  const Placements rep(static_cast<std::size_t>(mesh.ndim()), Replicate());
  auto p = [&](Shape s, std::uint64_t seed) {
    return distribute_tensor(Tensor::rand(s, DType::F64, seed), mesh, rep, mesh.ranks()[0]);
  };
  return {p({8, 4, 3, 3}, 11),  p({8}, 12),  p({8}, 13),           p({8}, 14),
          p({16, 8, 3, 3}, 15), p({16}, 16), p({16, 8, 2, 2}, 17), p({8}, 18),
          p({4, 16, 1, 1}, 19), p({4}, 20)};
}

struct Result {
  double loss = 0;
  std::map<std::string, Tensor> grads;  // whole tensors
};

Result run_block(const DeviceMesh& mesh, const Placements& spatial) {
  const Params P = make_params(mesh);
  // Every rank makes the same seeded tensors; the mesh's first rank's are sent.
  const int src = mesh.ranks()[0];
  const DTensor x =
      distribute_tensor(Tensor::rand({2, 4, 20, 22}, DType::F64, 1), mesh, spatial, src);
  const DTensor target =
      distribute_tensor(Tensor::rand({2, 4, 20, 22}, DType::F64, 2), mesh, spatial, src);
  const ConvParams same{.stride = {1}, .padding = {{1, 1}}, .dilation = {1}, .groups = 1};
  const ConvParams one{.stride = {1}, .padding = {{0, 0}}, .dilation = {1}, .groups = 1};
  const PoolParams pool{.kernel = {2}, .stride = {2}, .divisor_override = {}};
  const ConvTransposeParams up{.stride = {2}};

  // Forward.
  const DTensor c1 = convolution(x, P.w1, P.b1, same);
  const DTensor n1 = group_norm(c1, 2, P.g1, P.be1);
  const DTensor h = relu(n1);
  const DTensor p = max_pool(h, pool);
  const DTensor c2 = convolution(p, P.w2, P.b2, same);
  const DTensor q = relu(c2);
  const DTensor u = conv_transpose(q, P.wt, P.bt, up);
  const DTensor c = cat({u, h}, 1);
  const DTensor y = convolution(c, P.w3, P.b3, one);
  const DTensor loss = mse_loss(y, target);

  // Backward, in reverse.
  Result r;
  r.loss = loss.full_tensor().item({});
  const DTensor gy = mse_loss_backward(y, target);
  const ConvGrads g3 = convolution_backward(gy, c, P.w3, one);
  const auto gcat = cat_backward(*g3.grad_input, {u, h}, 1);
  const ConvGrads gt = conv_transpose_backward(gcat[0], q, P.wt, up);
  const DTensor gc2 = relu_backward(*gt.grad_input, c2);
  const ConvGrads g2 = convolution_backward(gc2, p, P.w2, same);
  const DTensor gh = add(gcat[1], max_pool_backward(*g2.grad_input, h, pool));
  const DTensor gn1 = relu_backward(gh, n1);
  const NormGrads gn = group_norm_backward(gn1, c1, 2, P.g1);
  const ConvGrads g1 = convolution_backward(*gn.grad_input, x, P.w1, same);

  auto whole = [](const std::optional<DTensor>& t) { return t->full_tensor(); };
  r.grads = {{"input", whole(g1.grad_input)},     {"conv1.weight", whole(g1.grad_weight)},
             {"conv1.bias", whole(g1.grad_bias)}, {"norm1.weight", whole(gn.grad_weight)},
             {"norm1.bias", whole(gn.grad_bias)}, {"conv2.weight", whole(g2.grad_weight)},
             {"conv2.bias", whole(g2.grad_bias)}, {"up.weight", whole(gt.grad_weight)},
             {"up.bias", whole(gt.grad_bias)},    {"head.weight", whole(g3.grad_weight)},
             {"head.bias", whole(g3.grad_bias)}};
  return r;
}

}  // namespace

int main() {
  init_process_group();
  const int rank = get_rank();
  if (get_world_size() != 4) {
    if (rank == 0) std::fprintf(stderr, "run me on 4 ranks: dtensor-run -n 4 -- %s\n", "...");
    destroy_process_group();
    return 2;
  }
  const DeviceMesh mesh(DeviceType::CPU, {2, 2});
  const Result sharded = run_block(mesh, {Shard(2), Shard(3)});  // H and W sharded
  // The same block on a mesh of this rank alone: the one-process result.
  const DeviceMesh alone(DeviceType::CPU, {1}, {rank});
  const Result whole = run_block(alone, {Replicate()});

  double worst = std::abs(sharded.loss - whole.loss) / std::max(1.0, std::abs(whole.loss));
  if (rank == 0) std::printf("loss %.12f (one process %.12f)\n", sharded.loss, whole.loss);
  for (const auto& [name, g] : sharded.grads) {
    const Tensor& ref = whole.grads.at(name);
    const double rel = max_abs_diff(g, ref) / std::max(1.0, max_abs(ref));
    worst = std::max(worst, rel);
    if (rank == 0) std::printf("  grad %-13s max rel diff %.2e\n", name.c_str(), rel);
  }
  const bool ok = worst <= 1e-10;
  if (rank == 0)
    std::printf("%s: largest relative difference %.2e\n", ok ? "ok" : "MISMATCH", worst);
  destroy_process_group();
  return ok ? 0 : 1;
}
