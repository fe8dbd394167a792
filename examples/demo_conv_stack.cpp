// The main demo: a three-layer convolution stack, forward and backward,
// spatially parallel on a 2x2 mesh (H on mesh dim 0, W on mesh dim 1) over a
// 2x32x512x512 image, checked against the same stack run in one process.
//
//   dtensor-run -n 4 -- dtensor-demo [--size 512] [--channels 32] [--batch 2]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <dtensor/dtensor.h>

using namespace dtensor;
using Clock = std::chrono::steady_clock;

namespace {

struct Layer {
  Tensor weight, bias;  // global, the same on every rank (seeded)
  ConvParams params;
};

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// The single-process stack: the same local kernels on the whole image.
struct Reference {
  Tensor y, grad_x;
  std::vector<Tensor> grad_w, grad_b;
};
Reference run_single(const Tensor& x, const std::vector<Layer>& layers, const Tensor& gy_seeded) {
  auto k = local_conv_kernels(Device::cpu(), x.dtype());
  std::vector<Tensor> inputs{x}, pre;  // inputs[i] feeds layer i; pre[i] = conv output
  for (std::size_t i = 0; i < layers.size(); ++i) {
    Tensor z = k->forward(inputs.back(), layers[i].weight, layers[i].bias, layers[i].params);
    pre.push_back(z);
    if (i + 1 < layers.size()) {
      Tensor a = z.clone();
      for (std::int64_t e = 0; e < a.numel(); ++e)
        a.data<float>()[e] = std::max(0.0f, a.data<float>()[e]);
      inputs.push_back(a);
    }
  }
  Reference r;
  r.y = pre.back();
  Tensor g = gy_seeded;
  r.grad_w.resize(layers.size());
  r.grad_b.resize(layers.size());
  for (std::size_t i = layers.size(); i-- > 0;) {
    auto wg = k->backward_weights(g, inputs[i], layers[i].weight.shape(), layers[i].params, true);
    r.grad_w[i] = wg.grad_weight;
    r.grad_b[i] = wg.grad_bias;
    g = k->backward_data(g, layers[i].weight, inputs[i].shape(), layers[i].params);
    if (i > 0) {  // through the relu before layer i
      for (std::int64_t e = 0; e < g.numel(); ++e)
        if (pre[i - 1].data<float>()[e] <= 0) g.data<float>()[e] = 0;
    }
  }
  r.grad_x = g;
  return r;
}

std::uint64_t bytes_sent(const DeviceMesh& mesh, ProcessGroup& world) {
  return world.counters().bytes_sent + mesh.get_group(0)->counters().bytes_sent +
         mesh.get_group(1)->counters().bytes_sent;
}

}  // namespace

int main(int argc, char** argv) try {
  std::int64_t size = 512, channels = 32, batch = 2;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    const std::int64_t v = std::atoll(argv[i + 1]);
    if (a == "--size")
      size = v;
    else if (a == "--channels")
      channels = v;
    else if (a == "--batch")
      batch = v;
    else
      throw InvalidArgument("demo", "unknown option " + a + " (--size, --channels, --batch)");
  }
  auto world = init_process_group();
  const int rank = world->rank();
  if (world->size() != 4) throw InvalidArgument("demo", "run it on 4 ranks: dtensor-run -n 4");
  DeviceMesh mesh(DeviceType::CPU, {2, 2});
  const Placements spatial{Shard(2), Shard(3)}, replicated{Replicate(), Replicate()};

  // Layers: 3x3; 3x3 dilated 2; 3x3 stride 2 to half the channels.
  std::vector<Layer> layers;
  const std::int64_t c = channels;
  const std::int64_t outs[3] = {c, c, c / 2};
  const ConvParams ps[3] = {
      {{1}, {{1, 1}}, {1}, 1}, {{1}, {{2, 2}}, {2}, 1}, {{2}, {{1, 1}}, {1}, 1}};
  std::int64_t in_c = c;
  for (int i = 0; i < 3; ++i) {
    layers.push_back({Tensor::rand({outs[i], in_c, 3, 3}, DType::F32, 10 + i),
                      Tensor::rand({outs[i]}, DType::F32, 20 + i), ps[i]});
    in_c = outs[i];
  }
  const Shape image{batch, c, size, size};
  if (rank == 0)
    std::printf("demo: 3 conv layers on a %s image, 2x2 mesh, H and W sharded (%s)\n",
                shape_str(image).c_str(), placements_str(spatial).c_str());

  // Each rank makes only its part of the seeded image.
  const DTensorSpec xspec(mesh, spatial, image, DType::F32);
  DTensor x(Tensor::rand_slice(image, xspec.global_offset(), xspec.local_shape(), DType::F32, 1),
            xspec);
  std::vector<DTensor> w, b;
  for (auto& l : layers) {
    w.push_back(distribute_tensor(l.weight, mesh, replicated));
    b.push_back(distribute_tensor(l.bias, mesh, replicated));
  }

  world->barrier();
  const auto sent0 = bytes_sent(mesh, *world);
  auto t0 = Clock::now();
  std::vector<DTensor> inputs{x}, pre;
  for (std::size_t i = 0; i < layers.size(); ++i) {
    pre.push_back(convolution(inputs.back(), w[i], b[i], layers[i].params));
    if (i + 1 < layers.size()) inputs.push_back(relu(pre.back()));
  }
  world->barrier();
  const double fwd_ms = ms_since(t0);
  const auto sent_fwd = bytes_sent(mesh, *world) - sent0;

  // A seeded grad_output, as if from a loss.
  const DTensorSpec& yspec = pre.back().spec();
  const Tensor GY = Tensor::rand(yspec.shape(), DType::F32, 2);
  DTensor gy(
      Tensor::rand_slice(yspec.shape(), yspec.global_offset(), yspec.local_shape(), DType::F32, 2),
      yspec);
  t0 = Clock::now();
  std::vector<DTensor> pending;  // grad_weight, grad_bias per layer: Partial(sum)
  DTensor g = gy;
  for (std::size_t i = layers.size(); i-- > 0;) {
    auto grads = convolution_backward(g, inputs[i], w[i], layers[i].params);
    pending.push_back(*grads.grad_weight);
    pending.push_back(*grads.grad_bias);
    g = *grads.grad_input;
    if (i > 0) g = relu_backward(g, pre[i - 1]);
  }
  // All weight gradients reduced together, in buckets (pending holds layer 3 first).
  auto reduced = reduce_partials(pending);
  std::vector<DTensor> gw, gb;
  for (std::size_t i = 0; i < layers.size(); ++i) {
    gw.push_back(reduced[2 * (layers.size() - 1 - i)]);
    gb.push_back(reduced[2 * (layers.size() - 1 - i) + 1]);
  }
  world->barrier();
  const double bwd_ms = ms_since(t0);
  const auto sent_total = bytes_sent(mesh, *world) - sent0;

  Tensor y_full = pre.back().full_tensor();
  Tensor gx_full = g.full_tensor();
  int status = 0;
  if (rank == 0) {
    std::printf(
        "distributed: forward %.1f ms, backward %.1f ms; rank 0 sent %.2f MiB (forward "
        "halos %.2f MiB)\n",
        fwd_ms, bwd_ms, sent_total / 1048576.0, sent_fwd / 1048576.0);
    const Tensor X = Tensor::rand(image, DType::F32, 1);
    t0 = Clock::now();
    Reference ref = run_single(X, layers, GY);
    std::printf("single process: forward + backward %.1f ms\n", ms_since(t0));
    auto rel = [](const Tensor& a, const Tensor& b) {
      return max_abs_diff(a, b) / std::max(1e-30, max_abs(b));
    };
    double worst = std::max(rel(y_full, ref.y), rel(gx_full, ref.grad_x));
    std::printf("max relative error: output %.2e, grad_input %.2e", rel(y_full, ref.y),
                rel(gx_full, ref.grad_x));
    for (std::size_t i = 0; i < layers.size(); ++i) {
      const double e =
          std::max(rel(gw[i].to_local(), ref.grad_w[i]), rel(gb[i].to_local(), ref.grad_b[i]));
      worst = std::max(worst, e);
      std::printf(", layer %zu grads %.2e", i + 1, e);
    }
    std::printf("\n%s (tolerance 1e-4, f32)\n",
                worst < 1e-4 ? "OK: matches the single-process run" : "MISMATCH");
    status = worst < 1e-4 ? 0 : 1;
  }
  destroy_process_group();
  return status;
} catch (const std::exception& e) {
  std::fprintf(stderr, "demo failed: %s\n", e.what());
  return 1;
}
