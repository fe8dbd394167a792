// Tests that need a CUDA device. Without one each prints why it skipped (a
// Catch2 WARN) and passes; scripts/gpu-check.sh sets DTENSOR_REQUIRE_GPU=1 so
// that a skip there is a failure.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dtensor/dtensor.h"
#include "tests/support/multiprocess.h"
#include "tests/support/reference_conv.h"

using namespace dtensor;

namespace {

// DTENSOR_REQUIRE_GPU=1 (scripts/gpu-check.sh) makes a machine without a GPU
// a failure; a test that needs more GPUs than a working machine has skips.
bool gpu_or_skip(int devices = 1) {
  const int n = cuda::device_count();
  if (n >= devices) return true;
  const std::string why =
      n == 0 ? cuda::unavailable_reason()
             : std::to_string(n) + " device(s), " + std::to_string(devices) + " needed";
  const char* req = std::getenv("DTENSOR_REQUIRE_GPU");
  if (n == 0 && req && std::string(req) == "1")
    FAIL("GPU required (DTENSOR_REQUIRE_GPU=1): " << why);
  WARN("skipped: " << why);
  return false;
}

testing::RunOptions with_backend(const char* backend) {
  testing::RunOptions o;
  o.env["DTENSOR_BACKEND"] = backend;
  o.deadline = std::chrono::seconds(120);
  return o;
}

}  // namespace

TEST_CASE("gpu: tensors round-trip, copy strided, convert, fill and add", "[cuda][gpu]") {
  if (!gpu_or_skip()) return;
  const Tensor h = Tensor::rand({4, 6, 5}, DType::F32, 3);
  const Tensor d = h.to(Device::cuda(0));
  CHECK(max_abs_diff(d.to(Device::cpu()), h) == 0.0);
  // Strided device -> device with conversion, then back.
  const Tensor part = d.narrow(1, 1, 4).narrow(2, 2, 3);
  const Tensor as64 = Tensor::empty(part.shape(), DType::F64, Device::cuda(0));
  Tensor(as64).copy_(part);
  CHECK(max_abs_diff(as64.to(Device::cpu()), h.narrow(1, 1, 4).narrow(2, 2, 3)) == 0.0);
  const Tensor bf = d.to(DType::BF16);
  CHECK(max_abs_diff(bf.to(Device::cpu()), h.to(DType::BF16)) == 0.0);  // same rounding
  Tensor z = Tensor::zeros({3, 3}, DType::F64, Device::cuda(0));
  z.narrow(0, 1, 1).fill_(2.5);
  z.add_(z.clone());
  CHECK(z.item({1, 2}) == 5.0);
  CHECK(z.item({0, 0}) == 0.0);
  cuda::synchronize();
}

TEST_CASE("gpu: cuDNN convolution matches the f64 oracle", "[cuda][gpu]") {
  if (!gpu_or_skip()) return;
  struct Case {
    Shape x, w;
    ConvParams p;
  };
  ConvParams a1;
  a1.padding = {{3, 0}};
  a1.stride = {2};
  ConvParams a2;
  a2.padding = {{0, 2}, {1, 1}};
  a2.dilation = {2, 1};
  a2.groups = 2;
  ConvParams a3;
  a3.padding = {{1, 1}};
  const Case cases[] = {{{2, 3, 17}, {4, 3, 4}, a1},
                        {{1, 4, 9, 8}, {6, 2, 3, 3}, a2},
                        {{1, 2, 5, 6, 7}, {3, 2, 3, 3, 3}, a3}};
  for (DType t : {DType::F64, DType::F32, DType::BF16, DType::F16}) {
    const double tol = t == DType::F64   ? 1e-12
                       : t == DType::F32 ? 1e-4
                       : t == DType::F16 ? 8e-3
                                         : 6e-2;
    auto k = local_conv_kernels(Device::cuda(0), t);
    CHECK(k->name() == "cuda " + std::string(dtype_name(t)));  // cuDNN, registered by dtype
    for (const auto& c : cases) {
      INFO(dtype_name(t) << " x " << shape_str(c.x) << " " << c.p.str());
      const Tensor x = Tensor::rand(c.x, t, 1), w = Tensor::rand(c.w, t, 2);
      const Tensor b = Tensor::rand({c.w[0]}, t, 3);
      const Device g = Device::cuda(0);
      const Tensor y = k->forward(x.to(g), w.to(g), b.to(g), c.p);
      const Tensor ry = testing::ref_conv_forward(x, w, b, c.p);
      CHECK(max_abs_diff(y.to(Device::cpu()), ry) <= tol * std::max(1.0, max_abs(ry)));
      const Tensor gy = Tensor::rand(ry.shape(), t, 4);
      const Tensor gx = k->backward_data(gy.to(g), w.to(g), c.x, c.p);
      const Tensor rgx = testing::ref_conv_grad_input(gy, w, c.x, c.p);
      CHECK(max_abs_diff(gx.to(Device::cpu()), rgx) <= tol * std::max(1.0, max_abs(rgx)));
      const auto gw = k->backward_weights(gy.to(g), x.to(g), c.w, c.p, true);
      const Tensor rgw = testing::ref_conv_grad_weight(gy, x, c.w, c.p);
      CHECK(max_abs_diff(gw.grad_weight.to(Device::cpu()), rgw) <=
            tol * std::max(1.0, max_abs(rgw)));
      const Tensor rgb = testing::ref_conv_grad_bias(gy);
      CHECK(max_abs_diff(gw.grad_bias.to(Device::cpu()), rgb) <= tol * std::max(1.0, max_abs(rgb)));
    }
  }
}

TEST_CASE("gpu: NCCL with one rank", "[cuda][gpu][nccl]") {
  if (!gpu_or_skip()) return;
  testing::run_ranks(
      1,
      [](testing::RankContext& ctx) {
        CHECK(ctx.pg->backend_name() == "cpu:gloo,cuda:nccl");
        const Device g = Device::cuda(cuda::current_device());
        Tensor t = Tensor::full({5}, 2.0, DType::F32).to(g);
        ctx.pg->allreduce(t);
        CHECK(t.item({4}) == 2.0);
        Tensor out = Tensor::zeros({5}, DType::F32, g);
        ctx.pg->allgather(t, out, {5});
        CHECK(out.item({0}) == 2.0);
        ctx.pg->reduce_scatter(t, out, {5});
        ctx.pg->broadcast(t, 0);
        ctx.pg->all_to_all(t, {5}, out, {5});
        ctx.pg->barrier();
        auto sub = ctx.pg->new_subgroup({0});
        sub->allreduce(t, ReduceOp::Max);
        CHECK(t.item({0}) == 2.0);
        // ncclCommSplit (split_groups), and a rank in no list gets no group.
        auto split = ctx.pg->split_groups({{0}});
        REQUIRE(split != nullptr);
        CHECK(split->size() == 1);
        split->allreduce(t);
        CHECK(t.item({0}) == 2.0);
        CHECK(ctx.pg->split_groups({}) == nullptr);
        Tensor h = Tensor::full({3}, 1.5, DType::F16).to(g);  // ncclFloat16
        split->allreduce(h);
        CHECK(h.item({2}) == 1.5);
      },
      with_backend("nccl"));
}

TEST_CASE("gpu: two ranks share one GPU over the Gloo staging path", "[cuda][gpu]") {
  if (!gpu_or_skip()) return;
  testing::run_ranks(
      2,
      [](testing::RankContext& ctx) {
        CHECK(ctx.pg->backend_name() == "cpu:gloo,cuda:gloo");
        DeviceMesh mesh(DeviceType::CUDA, {2});
        const Tensor x = Tensor::rand({2, 3, 11, 6}, DType::F32, 21);
        const Tensor w = Tensor::rand({4, 3, 3, 2}, DType::F32, 22);
        ConvParams p;
        p.padding = {{1, 1}, {1, 0}};
        auto dx = distribute_tensor(x, mesh, {Shard(2)});
        auto dw = distribute_tensor(w, mesh, {Replicate()});
        CHECK(dx.to_local().device().is_cuda());
        const Tensor y = convolution(dx, dw, std::nullopt, p).full_tensor();
        const Tensor ry = testing::ref_conv_forward(x, w, Tensor(), p);
        CHECK(max_abs_diff(y.to(Device::cpu()), ry) <= 1e-4 * std::max(1.0, max_abs(ry)));
      },
      with_backend("cpu:gloo,cuda:gloo"));
}

TEST_CASE("gpu: NCCL halo convolution on two GPUs", "[cuda][gpu][nccl]") {
  if (!gpu_or_skip(2)) return;
  testing::run_ranks(
      2,
      [](testing::RankContext&) {
        DeviceMesh mesh(DeviceType::CUDA, {2});
        const Tensor x = Tensor::rand({1, 2, 13}, DType::F64, 31);
        const Tensor w = Tensor::rand({3, 2, 5}, DType::F64, 32);
        ConvParams p;
        p.padding = {{2, 2}};
        auto dx = distribute_tensor(x, mesh, {Shard(2)});
        auto dw = distribute_tensor(w, mesh, {Replicate()});
        const Tensor y = convolution(dx, dw, std::nullopt, p).full_tensor();
        CHECK(max_abs_diff(y.to(Device::cpu()), testing::ref_conv_forward(x, w, Tensor(), p)) <
              1e-12);
      },
      with_backend("nccl"));
}

TEST_CASE("gpu: pointwise ops and reductions on CUDA tensors match the CPU kernels",
          "[cuda][gpu][pointwise]") {
  if (!gpu_or_skip()) return;
  testing::run_ranks(1, [](testing::RankContext&) {
    const Device g = Device::cuda(cuda::current_device());
    DeviceMesh cpu(DeviceType::CPU, {1});
    DeviceMesh gpu(DeviceType::CUDA, {1});
    for (DType t : {DType::F32, DType::F64, DType::BF16, DType::F16}) {
      INFO(dtype_name(t));
      const Tensor a = Tensor::rand({3, 7, 33}, t, 1), b = Tensor::rand({3, 7, 33}, t, 2);
      // distribute_tensor takes the host tensor; a CUDA mesh's local parts land on g.
      const auto on = [](const DeviceMesh& m, const Tensor& x) {
        return distribute_tensor(x, m, {Replicate()});
      };
      const DTensor ca = on(cpu, a), cb = on(cpu, b), ga = on(gpu, a), gb = on(gpu, b);
      const auto host = [](const DTensor& x) { return x.to_local().to(Device::cpu()); };
      // Same arithmetic in the same precision: equal bits for the element-wise ops.
      CHECK(max_abs_diff(host(add(ga, gb)), add(ca, cb).to_local()) == 0.0);
      CHECK(max_abs_diff(host(mul(ga, gb)), mul(ca, cb).to_local()) == 0.0);
      CHECK(max_abs_diff(host(sub(ga, gb)), sub(ca, cb).to_local()) == 0.0);
      CHECK(max_abs_diff(host(div(ga, gb)), div(ca, cb).to_local()) == 0.0);
      CHECK(max_abs_diff(host(maximum(ga, gb)), maximum(ca, cb).to_local()) == 0.0);
      CHECK(max_abs_diff(host(minimum(ga, gb)), minimum(ca, cb).to_local()) == 0.0);
      CHECK(max_abs_diff(host(scale(ga, 0.375)), scale(ca, 0.375).to_local()) == 0.0);
      CHECK(max_abs_diff(host(relu(ga)), relu(ca).to_local()) == 0.0);
      CHECK(max_abs_diff(host(relu_backward(ga, gb)), relu_backward(ca, cb).to_local()) == 0.0);
      CHECK(add(ga, gb).to_local().device() == g);
      // Broadcasting: [7, 1] and [33] against [3, 7, 33], either side.
      const Tensor col = Tensor::rand({7, 1}, t, 3), row = Tensor::rand({33}, t, 4);
      const DTensor ccol = on(cpu, col), gcol = on(gpu, col), crow = on(cpu, row),
                    grow = on(gpu, row);
      CHECK(max_abs_diff(host(add(ga, gcol)), add(ca, ccol).to_local()) == 0.0);
      CHECK(max_abs_diff(host(sub(gcol, ga)), sub(ccol, ca).to_local()) == 0.0);
      CHECK(max_abs_diff(host(mul(grow, ga)), mul(crow, ca).to_local()) == 0.0);
      CHECK(max_abs_diff(host(div(ga, grow)), div(ca, crow).to_local()) == 0.0);
      CHECK(max_abs_diff(host(maximum(gcol, grow)), maximum(ccol, crow).to_local()) == 0.0);
      // Sums: f64 accumulation in another order, so rounding of the f64 sum and
      // of the result's dtype.
      const double u = t == DType::F64 ? 1e-12 : t == DType::F32 ? 1e-6 : 1e-2;
      const double s = sum(ca).to_local().item({});
      CHECK(std::abs(host(sum(ga)).item({}) - s) <= u * std::max(1.0, std::abs(s)));
      const double m = mean(ca).to_local().item({});
      CHECK(std::abs(host(mean(ga)).item({}) - m) <= u * std::max(1.0, std::abs(m)));
    }
    cuda::synchronize();
  });
}

TEST_CASE("gpu: the element-wise functions and activations on CUDA match the CPU kernels",
          "[cuda][gpu][pointwise]") {
  if (!gpu_or_skip()) return;
  testing::run_ranks(1, [](testing::RankContext&) {
    DeviceMesh cpu(DeviceType::CPU, {1});
    DeviceMesh gpu(DeviceType::CUDA, {1});
    using Fn = std::function<DTensor(const DTensor&, const DTensor&)>;
    // Each forward and backward through the public operators; inputs in
    // (0.1, 2.1) so that log, sqrt, rsqrt and pow are defined.
    const std::vector<std::pair<std::string, Fn>> fns = {
        {"exp", [](const DTensor& g, const DTensor& x) { return exp_backward(g, exp(x)); }},
        {"log", [](const DTensor& g, const DTensor& x) { return log_backward(g, natural_log(x)); }},
        {"sqrt", [](const DTensor& g, const DTensor& x) { return sqrt_backward(g, sqrt(x)); }},
        {"rsqrt", [](const DTensor& g, const DTensor& x) { return rsqrt_backward(g, rsqrt(x)); }},
        {"neg", [](const DTensor& g, const DTensor& x) { return neg_backward(g, neg(x)); }},
        {"abs", [](const DTensor& g, const DTensor& x) { return abs_backward(g, abs(x)); }},
        {"square",
         [](const DTensor& g, const DTensor& x) { return square_backward(g, square(x)); }},
        {"clamp",
         [](const DTensor& g, const DTensor& x) {
           return clamp_backward(g, clamp(x, 0.5, 1.5), std::nullopt, 1.2);
         }},
        {"pow",
         [](const DTensor& g, const DTensor& x) { return pow_backward(g, pow(x, 1.7), 2.5); }},
        {"leaky_relu",
         [](const DTensor& g, const DTensor& x) {
           return leaky_relu_backward(g, leaky_relu(x, 0.2), 0.3);
         }},
        {"gelu",
         [](const DTensor& g, const DTensor& x) {
           return add(gelu_backward(g, gelu(x, GeluApproximate::Tanh)),
                      gelu_backward(g, gelu(x), GeluApproximate::Tanh));
         }},
        {"silu", [](const DTensor& g, const DTensor& x) { return silu_backward(g, silu(x)); }},
        {"sigmoid",
         [](const DTensor& g, const DTensor& x) { return sigmoid_backward(g, sigmoid(x)); }},
        {"tanh", [](const DTensor& g, const DTensor& x) { return tanh_backward(g, tanh(x)); }}};
    for (DType t : {DType::F32, DType::F64, DType::BF16, DType::F16}) {
      Tensor x64 = Tensor::rand({3, 5, 70}, DType::F64, 3);
      for (std::int64_t i = 0; i < x64.numel(); ++i)
        x64.data<double>()[i] = 1.1 + std::abs(x64.data<double>()[i]);
      const Tensor x = x64.to(t);
      const Tensor g = Tensor::rand({3, 5, 70}, t, 4);
      const auto on = [](const DeviceMesh& m, const Tensor& v) {
        return distribute_tensor(v, m, {Replicate()});
      };
      for (const auto& [name, fn] : fns) {
        INFO(name << " " << dtype_name(t));
        const Tensor want = fn(on(cpu, g), on(cpu, x)).to_local();
        const Tensor got = fn(on(gpu, g), on(gpu, x)).to_local().to(Device::cpu());
        // The same formula in the same precision; only the device's libm
        // (exp, erf, tanh, pow) may round its last bit otherwise.
        const double tol = t == DType::F64 ? 1e-13 : t == DType::F32 ? 1e-5 : 2e-2;
        CHECK(max_abs_diff(got, want) <= tol * std::max(1.0, max_abs(want)));
      }
    }
    cuda::synchronize();
  });
}

TEST_CASE("gpu: reductions over dims and their gradients on CUDA match the CPU kernels",
          "[cuda][gpu][pointwise]") {
  if (!gpu_or_skip()) return;
  testing::run_ranks(1, [](testing::RankContext&) {
    DeviceMesh cpu(DeviceType::CPU, {1});
    DeviceMesh gpu(DeviceType::CUDA, {1});
    using Dims = std::vector<std::int64_t>;
    for (DType t : {DType::F32, DType::F64, DType::BF16, DType::F16}) {
      const Tensor x = Tensor::rand({4, 6, 35}, t, 5);
      const double tol = t == DType::F64 ? 1e-12 : t == DType::F32 ? 1e-5 : 2e-2;
      for (const Dims& dims : {Dims{1}, Dims{0, 2}, Dims{2}, Dims{0, 1, 2}}) {
        for (const bool keepdim : {false, true}) {
          INFO(dtype_name(t) << " dims " << dims.size() << " keepdim " << keepdim);
          // Every reduction of x, and (autograd) the gradient of their sum,
          // which runs reduce_expand and reduce_tie_mask.
          const auto run = [&](const DeviceMesh& m) {
            DTensor in = distribute_tensor(x, m, {Replicate()});
            in.requires_grad_();
            const std::vector<DTensor> outs = {sum(in, dims, keepdim), mean(in, dims, keepdim),
                                               amax(in, dims, keepdim), amin(in, dims, keepdim),
                                               var(in, dims, 1.0, keepdim)};
            DTensor total = sum(outs[0]);
            for (std::size_t k = 1; k < outs.size(); ++k)
              total = add(total, sum(outs[k]));
            backward(total);
            std::vector<Tensor> host;
            for (const auto& o : outs)
              host.push_back(o.to_local().to(Device::cpu()));
            host.push_back(in.grad()->to_local().to(Device::cpu()));
            return host;
          };
          const auto want = run(cpu), got = run(gpu);
          for (std::size_t k = 0; k < want.size(); ++k) {
            INFO("result " << k);
            CHECK(max_abs_diff(got[k], want[k]) <= tol * std::max(1.0, max_abs(want[k])));
          }
        }
      }
      // sum_to_size (a broadcast add's gradient) and softmax.
      const auto on = [](const DeviceMesh& m, const Tensor& v) {
        return distribute_tensor(v, m, {Replicate()});
      };
      const Tensor s_cpu = sum_to_size(on(cpu, x), {6, 1}).to_local();
      const Tensor s_gpu = sum_to_size(on(gpu, x), {6, 1}).to_local().to(Device::cpu());
      CHECK(max_abs_diff(s_gpu, s_cpu) <= tol * std::max(1.0, max_abs(s_cpu)));
      const Tensor sm_cpu = softmax(on(cpu, x), 2).to_local();
      const Tensor sm_gpu = softmax(on(gpu, x), 2).to_local().to(Device::cpu());
      CHECK(max_abs_diff(sm_gpu, sm_cpu) <= tol);
    }
    cuda::synchronize();
  });
}

TEST_CASE("gpu: dropout, permute and linear on CUDA match the CPU kernels",
          "[cuda][gpu][pointwise]") {
  if (!gpu_or_skip()) return;
  testing::run_ranks(1, [](testing::RankContext&) {
    DeviceMesh cpu(DeviceType::CPU, {1});
    DeviceMesh gpu(DeviceType::CUDA, {1});
    const auto on = [](const DeviceMesh& m, const Tensor& v) {
      return distribute_tensor(v, m, {Replicate()});
    };
    const auto host = [](const DTensor& x) { return x.to_local().to(Device::cpu()); };
    for (DType t : {DType::F32, DType::F64, DType::BF16, DType::F16}) {
      INFO(dtype_name(t));
      const Tensor x = Tensor::rand({5, 3, 8, 6}, t, 7);
      // The same mask bit for bit, and the same permutation.
      CHECK(max_abs_diff(host(dropout(on(gpu, x), 0.3, 11, 2)),
                         dropout(on(cpu, x), 0.3, 11, 2).to_local()) == 0.0);
      CHECK(max_abs_diff(host(permute(on(gpu, x), {2, 0, 3, 1})),
                         permute(on(cpu, x), {2, 0, 3, 1}).to_local()) == 0.0);
      // linear and its gradients (autograd runs linear.backward).
      const Tensor w = Tensor::rand({7, 6}, t, 8), b = Tensor::rand({7}, t, 9);
      const auto run = [&](const DeviceMesh& m) {
        DTensor in = on(m, x), weight = on(m, w), bias = on(m, b);
        in.requires_grad_();
        weight.requires_grad_();
        bias.requires_grad_();
        const DTensor y = linear(in, weight, bias);
        backward(sum(mul(y, y)));
        return std::vector<Tensor>{host(y), host(*in.grad()), host(*weight.grad()),
                                   host(*bias.grad())};
      };
      const auto want = run(cpu), got = run(gpu);
      const double tol = t == DType::F64 ? 1e-12 : t == DType::F32 ? 1e-5 : 3e-2;
      for (std::size_t k = 0; k < want.size(); ++k) {
        INFO("linear result " << k);
        CHECK(max_abs_diff(got[k], want[k]) <= tol * std::max(1.0, max_abs(want[k])));
      }
    }
    cuda::synchronize();
  });
}
