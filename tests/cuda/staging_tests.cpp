// CUDA tensors over Gloo, staged through host memory, checked on a CPU-only
// machine: the rank processes install a fake "CUDA" device whose memory is
// plain host memory (allocator + DeviceOps), and the CPU convolution kernels
// for it. Everything above the device — Tensor::to, routing, staging, DTensor
// on a CUDA mesh, the halo exchange — then runs exactly as on a GPU.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>

#include "core/detail/device_ops.h"
#include "core/detail/monitored_process_group.h"
#include "core/detail/routing_process_group.h"
#include "core/detail/validating_process_group.h"
#include "dtensor/dtensor.h"
#include "tests/support/multiprocess.h"
#include "tests/support/reference_conv.h"

using namespace dtensor;
using dtensor::testing::run_ranks;

namespace {

// Element-wise loops over any strides, in f64: slow and obviously right.
template <typename Fn>
void for_each_index(const Shape& shape, Fn&& fn) {
  const std::int64_t n = shape_numel(shape);
  Shape idx(shape.size(), 0);
  for (std::int64_t i = 0; i < n; ++i) {
    fn(idx);
    for (std::size_t d = shape.size(); d-- > 0;) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
}
std::int64_t offset(const Tensor& t, const Shape& idx) {
  std::int64_t o = 0;
  for (std::size_t d = 0; d < idx.size(); ++d)
    o += idx[d] * t.strides()[d];
  return o;
}
double load(const Tensor& t, std::int64_t o) {
  return visit_dtype(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T v = static_cast<const T*>(t.data_ptr())[o];
    if constexpr (is_half_float_v<T>)
      return static_cast<double>(static_cast<float>(v));
    else
      return static_cast<double>(v);
  });
}
void store(const Tensor& t, std::int64_t o, double v) {
  visit_dtype(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (is_half_float_v<T>)
      static_cast<T*>(t.data_ptr())[o] = T(static_cast<float>(v));
    else
      static_cast<T*>(t.data_ptr())[o] = static_cast<T>(v);
  });
}

class FakeDeviceOps final : public detail::DeviceOps {
 public:
  void copy(const Tensor& dst, const Tensor& src) override {
    ++copies;
    for_each_index(dst.shape(),
                   [&](const Shape& i) { store(dst, offset(dst, i), load(src, offset(src, i))); });
  }
  void fill(const Tensor& dst, double v) override {
    for_each_index(dst.shape(), [&](const Shape& i) { store(dst, offset(dst, i), v); });
  }
  void add(const Tensor& dst, const Tensor& src) override {
    for_each_index(dst.shape(), [&](const Shape& i) {
      store(dst, offset(dst, i), load(dst, offset(dst, i)) + load(src, offset(src, i)));
    });
  }
  int device_count() override { return 1; }
  std::string unavailable_reason() override { return ""; }
  int current_device() override { return 0; }
  void set_device(int) override {}
  void synchronize() override {}
  void select_local_device(int) override {}
  std::size_t cached_bytes() override { return cached; }
  int copies = 0;
  std::size_t cached = 0;
};

// The CPU kernels on the fake device's (host) memory; results move to the device.
kernels::DenseConvPasses fake_device_conv(DType t) {
  const auto cpu = local_conv_kernels(Device::cpu(), t);
  return {[cpu](const Tensor& x, const Tensor& w, const Tensor& b, const ConvParams& p) {
            return cpu->forward(x, w, b, p).to(x.device());
          },
          [cpu](const Tensor& gy, const Tensor& w, const Shape& s, const ConvParams& p) {
            return cpu->backward_data(gy, w, s, p).to(gy.device());
          },
          [cpu](const Tensor& gy, const Tensor& x, const Shape& s, const ConvParams& p, bool bias) {
            ConvWeightGrads g = cpu->backward_weights(gy, x, s, p, bias);
            g.grad_weight = g.grad_weight.to(x.device());
            if (g.grad_bias.defined()) g.grad_bias = g.grad_bias.to(x.device());
            return g;
          }};
}

std::shared_ptr<FakeDeviceOps> install_fake_cuda() {
  auto ops = std::make_shared<FakeDeviceOps>();
  detail::register_device_ops(DeviceType::CUDA, ops);
  Storage::set_device_allocator(DeviceType::CUDA, [](std::size_t n, Device d) {
    void* p = std::aligned_alloc(64, (n + 63) / 64 * 64 + 64);
    return std::make_shared<Storage>(p, n, d, [](void* q) { std::free(q); });
  });
  // The CPU kernels read host memory, which is what the fake device has.
  for (DType t : {DType::F32, DType::F64})
    kernels::register_dense_conv_kernels(DeviceType::CUDA, t, fake_device_conv(t),
                                         /*override_existing=*/true);
  return ops;
}

testing::RunOptions staged() {
  testing::RunOptions o;
  o.env["DTENSOR_BACKEND"] = "cpu:gloo,cuda:gloo";
  return o;
}

}  // namespace

TEST_CASE("staging: device tensors round-trip and copy between devices", "[cuda][staging]") {
  // In a rank process of its own: the fake device must not outlive the test
  // (later tests of this binary ask whether a real GPU is there).
  run_ranks(1, [](testing::RankContext&) {
    auto ops = install_fake_cuda();
    const Tensor h = Tensor::rand({3, 5}, DType::F64, 7);
    const Tensor d = h.to(Device::cuda(0));
    CHECK(d.device() == Device::cuda(0));
    CHECK(d.item({2, 4}) == h.item({2, 4}));
    CHECK(max_abs_diff(d.to(Device::cpu()), h) == 0.0);
    Tensor z = Tensor::zeros({3, 5}, DType::F32, Device::cuda(0));
    z.narrow(1, 1, 3).copy_(h.narrow(1, 1, 3));
    z.add_(z.clone());
    CHECK(z.item({1, 2}) == Approx(2 * h.item({1, 2})).epsilon(1e-6));
    CHECK(z.item({1, 0}) == 0.0);
    CHECK(ops->copies > 0);
  });
}

TEST_CASE("memory_stats(CUDA): the device's live, peak and cached bytes", "[cuda][staging]") {
  run_ranks(1, [](testing::RankContext&) {
    auto ops = install_fake_cuda();
    reset_peak_memory_stats(DeviceType::CUDA);
    const MemoryStats before = memory_stats(DeviceType::CUDA);
    {
      const Tensor a = Tensor::zeros({1000}, DType::F64, Device::cuda(0));
      const MemoryStats during = memory_stats(DeviceType::CUDA);
      CHECK(during.allocated_bytes == before.allocated_bytes + 8000);
      CHECK(during.peak_allocated_bytes >= during.allocated_bytes);
    }
    const MemoryStats after = memory_stats(DeviceType::CUDA);
    CHECK(after.allocated_bytes == before.allocated_bytes);
    CHECK(after.peak_allocated_bytes == before.allocated_bytes + 8000);
    // Cached: what the device's allocator says it holds.
    ops->cached = 12345;
    CHECK(memory_stats(DeviceType::CUDA).cached_bytes == 12345);
    CHECK(memory_stats(DeviceType::CPU).cached_bytes == cached_cpu_memory());
  });
}

TEST_CASE("staging: collectives and p2p on CUDA tensors over Gloo", "[cuda][staging]") {
  run_ranks(
      2,
      [](testing::RankContext& ctx) {
        install_fake_cuda();
        // The world is the routing group behind its validating layer, wrapped
        // by the fault monitor.
        auto* monitored = dynamic_cast<detail::MonitoredProcessGroup*>(ctx.pg.get());
        REQUIRE(monitored != nullptr);
        auto* validating = dynamic_cast<detail::ValidatingProcessGroup*>(monitored->inner().get());
        REQUIRE(validating != nullptr);
        auto* routing = dynamic_cast<detail::RoutingProcessGroup*>(validating->inner().get());
        REQUIRE(routing != nullptr);
        CHECK(routing->cuda_group() == nullptr);
        CHECK(ctx.pg->backend_name() == "cpu:gloo,cuda:gloo");
        const Device dev = Device::cuda(0);

        Tensor t = Tensor::full({4}, ctx.rank + 1.0, DType::F32).to(dev);
        ctx.pg->allreduce(t);
        CHECK(t.device() == dev);
        CHECK(t.item({3}) == 3.0);

        // Uneven allgather: rank 0 gives 1 element, rank 1 gives 2.
        Tensor in = Tensor::full({ctx.rank + 1}, 10.0 + ctx.rank, DType::F64).to(dev);
        Tensor out = Tensor::zeros({3}, DType::F64, dev);
        ctx.pg->allgather(in, out, {1, 2});
        CHECK(out.item({0}) == 10.0);
        CHECK(out.item({2}) == 11.0);

        // A batch mixing a staged CUDA exchange and a CPU one.
        const int peer = 1 - ctx.rank;
        Tensor send_d = Tensor::full({2}, 100.0 + ctx.rank, DType::F32).to(dev);
        Tensor recv_d = Tensor::zeros({2}, DType::F32, dev);
        Tensor send_h = Tensor::full({1}, 5.0 + ctx.rank, DType::F64);
        Tensor recv_h = Tensor::zeros({1}, DType::F64);
        auto works =
            ctx.pg->batch_isend_irecv({P2POp::send(send_d, peer, 1), P2POp::recv(recv_d, peer, 1),
                                       P2POp::send(send_h, peer, 2), P2POp::recv(recv_h, peer, 2)});
        wait_all(works);
        CHECK(recv_d.item({1}) == 100.0 + peer);
        CHECK(recv_h.item({0}) == 5.0 + peer);

        // Mixed devices in one collective are refused, identically on every rank.
        Tensor host_out = Tensor::zeros({3}, DType::F64);
        CHECK_THROWS_AS(ctx.pg->allgather(in, host_out, {1, 2}), InvalidArgument);

        // A batch whose CUDA entry is bad posts none of its CPU entries either
        // (the validating layer in front of the router checks it whole).
        Tensor stale = Tensor::zeros({1}, DType::F64);
        CHECK_THROWS_WITH(ctx.pg->batch_isend_irecv(
                              {P2POp::recv(stale, peer, 3), P2POp::send(send_d, peer + 2, 3)}),
                          Catch::Contains("dst=") && Catch::Contains("is outside the group"));
        Tensor fresh = Tensor::zeros({1}, DType::F64);
        auto again =
            ctx.pg->batch_isend_irecv({P2POp::recv(fresh, peer, 3), P2POp::send(send_h, peer, 3)});
        wait_all(again, std::chrono::milliseconds(10000));
        CHECK(fresh.item({0}) == 5.0 + peer);
        CHECK(stale.item({0}) == 0.0);
      },
      staged());
}

TEST_CASE("staging: halo convolution of a CUDA DTensor matches the oracle", "[cuda][staging]") {
  run_ranks(
      2,
      [](testing::RankContext&) {
        install_fake_cuda();
        DeviceMesh mesh(DeviceType::CUDA, {2});
        CHECK(mesh.device() == Device::cuda(0));
        const Tensor x = Tensor::rand({1, 2, 9}, DType::F64, 11);
        const Tensor w = Tensor::rand({3, 2, 3}, DType::F64, 12);
        const Tensor b = Tensor::rand({3}, DType::F64, 13);
        ConvParams p;
        p.padding = {{2, 1}};
        auto dx = distribute_tensor(x, mesh, {Shard(2)});
        auto dw = distribute_tensor(w, mesh, {Replicate()});
        auto db = distribute_tensor(b, mesh, {Replicate()});
        CHECK(dx.to_local().device() == Device::cuda(0));
        DTensor y = convolution(dx, dw, db, p);
        CHECK(y.to_local().device() == Device::cuda(0));
        const Tensor full = y.full_tensor();
        const Tensor ref = testing::ref_conv_forward(x, w, b, p);
        CHECK(max_abs_diff(full, ref) < 1e-12);

        // Backward: the grad_input halo goes back (and is added) across ranks.
        const Tensor gy = Tensor::rand(ref.shape(), DType::F64, 14);
        auto dgy = distribute_tensor(gy, mesh, {Shard(2)});
        auto grads =
            convolution_backward(dgy, dx, dw, p, {.input = true, .weight = true, .bias = true});
        REQUIRE(grads.grad_input.has_value());
        CHECK(grads.grad_input->to_local().device() == Device::cuda(0));
        CHECK(max_abs_diff(grads.grad_input->full_tensor(),
                           testing::ref_conv_grad_input(gy, w, x.shape(), p)) < 1e-12);
        CHECK(max_abs_diff(grads.grad_weight->full_tensor(),
                           testing::ref_conv_grad_weight(gy, x, w.shape(), p)) < 1e-12);
      },
      staged());
}
