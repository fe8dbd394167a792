// Training a small CNN with spatial parallelism: every image of the batch is
// split into tiles, H over mesh dim 0 and W over mesh dim 1, and each rank
// holds one tile of every activation. Convolutions exchange halos with the
// neighbouring tiles; the weight gradients come back Partial(sum) and one
// all-reduce (redistribute to Replicate) makes them whole before the SGD step.
//
// The network (3x3 convolutions, ReLU between them) learns to imitate a fixed
// random 5x5 "teacher" convolution on synthetic data, with a mean-squared-error
// loss. There is no autograd: the backward pass below walks the layers in
// reverse with convolution_backward and relu_backward.
//
//   dtensor-run -n 4 -- dtensor-train-cnn            # 2x2 mesh, H and W sharded
//   dtensor-train-cnn                                # one process (1x1 mesh)
//
// Both print the same loss curve to rounding (about 1e-7 relative in f32:
// only the order of summation differs): that is the point of the
// library, and what tests/examples checks.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <dtensor/dtensor.h>

using namespace dtensor;

namespace {

struct Options {
  int steps = 20;
  Shape mesh;  // empty: 2x2 on 4 ranks, 1x1 on one, P x 1 otherwise
  DType dtype = DType::F32;
  double lr = 0.1;
  std::int64_t batch = 4;
  std::int64_t size = 32;  // images are size x size
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      check_arg(i + 1 < argc, "train_cnn", "{} needs a value", a);
      return argv[++i];
    };
    if (a == "--steps") {
      o.steps = std::stoi(value());
    } else if (a == "--mesh") {
      o.mesh = parse_int_list(value(), "--mesh", 'x');
    } else if (a == "--dtype") {
      o.dtype = parse_dtype(value());
    } else if (a == "--lr") {
      o.lr = std::stod(value());
    } else if (a == "--batch") {
      o.batch = std::stoll(value());
    } else if (a == "--size") {
      o.size = std::stoll(value());
    } else {
      std::fprintf(stderr,
                   "usage: %s [--steps N] [--mesh RxC] [--dtype f32|f64] [--lr X] [--batch N] "
                   "[--size S]\n",
                   argv[0]);
      std::exit(a == "--help" ? 0 : 2);
    }
  }
  return o;
}

// One convolution layer's parameters, replicated on every rank.
struct Layer {
  DTensor weight;
  DTensor bias;
  ConvParams params;
};

// He-style initialisation: uniform in +-sqrt(6 / fan_in), so activations keep
// their scale through the ReLUs. Every rank generates the same values (seeded).
Layer make_layer(const DeviceMesh& mesh, const Shape& weight_shape, const ConvParams& params,
                 DType dtype, std::uint64_t seed) {
  std::int64_t fan_in = 1;
  for (std::size_t d = 1; d < weight_shape.size(); ++d)
    fan_in *= weight_shape[d];
  const Placements replicated(mesh.ndim(), Replicate());
  DTensor w = distribute_tensor(Tensor::rand(weight_shape, dtype, seed), mesh, replicated);
  DTensor b = distribute_tensor(Tensor::zeros({weight_shape[0]}, dtype), mesh, replicated);
  return {scale(w, std::sqrt(6.0 / static_cast<double>(fan_in))), b, params};
}

// This rank's tile of a synthetic batch: generated locally from the seed (the
// global batch is never materialised), then wrapped with its spec.
DTensor synthetic_batch(const DeviceMesh& mesh, const Placements& placements, const Shape& shape,
                        DType dtype, std::uint64_t seed) {
  DTensorSpec spec(mesh, placements, shape, dtype);
  return DTensor(Tensor::rand_slice(shape, spec.global_offset(), spec.local_shape(), dtype, seed),
                 spec);
}

struct Activations {
  std::vector<DTensor> inputs;  // the input of each layer
  std::vector<DTensor> pre;     // each layer's output before its ReLU
};

// conv -> relu -> conv -> relu -> ... -> conv (no ReLU after the last).
DTensor forward(const std::vector<Layer>& net, const DTensor& x, Activations& acts) {
  DTensor h = x;
  for (std::size_t l = 0; l < net.size(); ++l) {
    acts.inputs.push_back(h);
    DTensor z = convolution(h, net[l].weight, net[l].bias, net[l].params);
    acts.pre.push_back(z);
    h = l + 1 < net.size() ? relu(z) : z;
  }
  return h;
}

// Walks the layers in reverse and applies SGD. grad_output is d(loss)/d(output).
void backward_and_step(std::vector<Layer>& net, const Activations& acts, DTensor grad_output,
                       double lr) {
  for (std::size_t l = net.size(); l-- > 0;) {
    Layer& layer = net[l];
    if (l + 1 < net.size()) grad_output = relu_backward(grad_output, acts.pre[l]);
    // The first layer's input is data: its gradient is not needed.
    const ConvGrads g = convolution_backward(grad_output, acts.inputs[l], layer.weight,
                                             layer.params, {.input = l > 0});
    // Partial(sum) over the mesh dims that shard H and W: sum the tiles' parts.
    const Placements replicated(layer.weight.mesh().ndim(), Replicate());
    const DTensor grad_w = g.grad_weight->redistribute(layer.weight.mesh(), replicated);
    const DTensor grad_b = g.grad_bias->redistribute(layer.weight.mesh(), replicated);
    layer.weight = add(layer.weight, scale(grad_w, -lr));
    layer.bias = add(layer.bias, scale(grad_b, -lr));
    if (l > 0) grad_output = *g.grad_input;
  }
}

Shape default_mesh(int world) {
  if (world == 4) return {2, 2};
  return {world, 1};
}

}  // namespace

int main(int argc, char** argv) try {
  const Options opt = parse(argc, argv);
  // One progress line per step, even when stdout is a pipe (dtensor-run's).
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  init_process_group();
  const Shape mesh_shape = opt.mesh.empty() ? default_mesh(get_world_size()) : opt.mesh;
  check_arg(mesh_shape.size() == 2 && shape_numel(mesh_shape) == get_world_size(), "train_cnn",
            "--mesh {} does not match the {} ranks", shape_str(mesh_shape), get_world_size());
  const DeviceMesh mesh = init_device_mesh(DeviceType::CPU, mesh_shape);
  const Placements tiles = {Shard(2), Shard(3)};  // H on mesh dim 0, W on mesh dim 1
  const bool leader = get_rank() == 0;

  // Same-size 3x3 convolutions; the middle one dilated so the network sees as
  // far as the 5x5 teacher does.
  const ConvParams same{.stride = {1}, .padding = {{1, 1}}, .dilation = {1}, .groups = 1};
  const ConvParams dilated{.stride = {1}, .padding = {{2, 2}}, .dilation = {2}, .groups = 1};
  std::vector<Layer> net = {make_layer(mesh, {8, 2, 3, 3}, same, opt.dtype, 11),
                            make_layer(mesh, {8, 8, 3, 3}, dilated, opt.dtype, 12),
                            make_layer(mesh, {1, 8, 3, 3}, same, opt.dtype, 13)};
  const ConvParams teacher_params{.padding = {{2, 2}}};
  const Layer teacher = make_layer(mesh, {1, 2, 5, 5}, teacher_params, opt.dtype, 99);

  const Shape batch_shape = {opt.batch, 2, opt.size, opt.size};
  if (leader)
    std::printf("training on %s, input %s tiled %s, local tile %s, %s\n", mesh.str().c_str(),
                shape_str(batch_shape).c_str(), placements_str(tiles).c_str(),
                shape_str(DTensorSpec(mesh, tiles, batch_shape, opt.dtype).local_shape()).c_str(),
                std::string(dtype_name(opt.dtype)).c_str());

  for (int step = 1; step <= opt.steps; ++step) {
    const auto t0 = std::chrono::steady_clock::now();
    // A fresh batch each step; the target is what the teacher makes of it.
    const DTensor x = synthetic_batch(mesh, tiles, batch_shape, opt.dtype, 1000 + step);
    const DTensor target = convolution(x, teacher.weight, teacher.bias, teacher.params);

    Activations acts;
    const DTensor y = forward(net, x, acts);
    // loss = mean((y - target)^2); d(loss)/dy = 2 (y - target) / numel.
    const DTensor diff = add(y, scale(target, -1.0));
    const double loss = mean(mul(diff, diff)).full_tensor().item({});
    const double numel = static_cast<double>(shape_numel(y.shape()));
    backward_and_step(net, acts, scale(diff, 2.0 / numel), opt.lr);

    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (leader) std::printf("step %d/%d loss %.10e (%.1f ms)\n", step, opt.steps, loss, ms);
  }
  destroy_process_group();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "train_cnn failed: %s\n", e.what());
  return 1;
}
