// Training a small CNN with spatial parallelism: every image of the batch is
// split into tiles, H over mesh dim 0 and W over mesh dim 1, and each rank
// holds one tile of every activation. Convolutions exchange halos with the
// neighbouring tiles; backward() computes every gradient (the weights' are
// reduced across the tiles once per step) and SGD updates the parameters.
//
// The network (nn::Conv2d layers, ReLU between them) learns to imitate a
// fixed random 5x5 "teacher" convolution on synthetic data, with a
// mean-squared-error loss: modules, autograd and an optimiser, as in PyTorch.
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
      require_floating(o.dtype, "--dtype");
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

// The student: conv -> relu -> conv (dilated) -> relu -> conv, a module with
// PyTorch's parameter names ("0.weight", "0.bias", "2.weight", ...).
std::shared_ptr<nn::Sequential> make_student(DType dtype) {
  nn::ConvOptions same{.padding = {1}, .dtype = dtype};
  // Dilated, so the network sees as far as the 5x5 teacher does.
  nn::ConvOptions dilated{.padding = {2}, .dilation = {2}, .dtype = dtype};
  auto net = std::make_shared<nn::Sequential>();
  net->push_back(std::make_shared<nn::Conv2d>(2, 8, 3, same));
  net->push_back(std::make_shared<nn::ReLU>());
  net->push_back(std::make_shared<nn::Conv2d>(8, 8, 3, dilated));
  net->push_back(std::make_shared<nn::ReLU>());
  net->push_back(std::make_shared<nn::Conv2d>(8, 1, 3, same));
  return net;
}

// This rank's tile of a synthetic batch: generated locally from the seed (the
// global batch is never materialised), then wrapped with its spec.
DTensor synthetic_batch(const DeviceMesh& mesh, const Placements& placements, const Shape& shape,
                        DType dtype, std::uint64_t seed) {
  DTensorSpec spec(mesh, placements, shape, dtype);
  return DTensor(Tensor::rand_slice(shape, spec.global_offset(), spec.local_shape(), dtype, seed),
                 spec);
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

  nn::manual_seed(11);  // the same initial weights on every rank, whatever the mesh
  auto net = make_student(opt.dtype);
  net->distribute(mesh);  // parameters replicated
  nn::SGD sgd(net->named_parameters(), {.lr = opt.lr});
  // The teacher is data, not trained: no gradient is recorded for it.
  nn::Conv2d teacher(2, 1, 5, {.padding = {2}, .dtype = opt.dtype});
  teacher.distribute(mesh);

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
    DTensor target = [&] {
      NoGradGuard no_grad;
      return teacher(x);
    }();

    const DTensor loss = mse_loss((*net)(x), target);
    const double loss_value = loss.to_local().item({});
    // Gradients of every parameter; the weights' come out Partial(sum) over
    // the mesh dims that shard H and W and are reduced at the end, bucketed.
    backward(loss);
    sgd.step();
    sgd.zero_grad();

    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (leader) std::printf("step %d/%d loss %.10e (%.1f ms)\n", step, opt.steps, loss_value, ms);
  }
  destroy_process_group();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "train_cnn failed: %s\n", e.what());
  return 1;
}
