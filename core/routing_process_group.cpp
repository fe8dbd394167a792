#include "core/detail/routing_process_group.h"

#include <fmt/format.h>

#include "dtensor/core/errors.h"

namespace dtensor::detail {
namespace {

constexpr const char* kComponent = "routing";

// A staged operation's handle: keeps the host buffer alive until the inner
// operation finished, and for a receive copies it into the device tensor.
class StagedWork final : public Work {
 public:
  StagedWork(std::shared_ptr<Work> inner, Tensor host, Tensor device_dst)
      : inner_(std::move(inner)), host_(std::move(host)), device_dst_(std::move(device_dst)) {}
  void wait(std::chrono::milliseconds timeout) override {
    inner_->wait(timeout);
    if (device_dst_.defined() && !copied_) {
      device_dst_.copy_(host_);
      copied_ = true;
    }
  }

 private:
  std::shared_ptr<Work> inner_;
  Tensor host_;
  Tensor device_dst_;  // undefined for sends
  bool copied_ = false;
};

Tensor host_like(const Tensor& t) {
  return Tensor::empty(t.shape(), t.dtype(), Device::cpu());
}

}  // namespace

Route route_for(Device device, bool has_cuda_backend) {
  if (device.is_cpu()) return Route::Cpu;
  return has_cuda_backend ? Route::Cuda : Route::CudaStaged;
}

std::string_view route_name(Route r) {
  switch (r) {
    case Route::Cpu:
      return "cpu";
    case Route::Cuda:
      return "cuda";
    case Route::CudaStaged:
      return "cuda-staged";
  }
  return "?";
}

RoutingProcessGroup::RoutingProcessGroup(std::shared_ptr<ProcessGroup> cpu,
                                         std::shared_ptr<ProcessGroup> cuda)
    : cpu_(std::move(cpu)), cuda_(std::move(cuda)) {
  check_arg(cpu_ != nullptr, kComponent, "a CPU process group is required");
  check_arg(!cuda_ || (cuda_->size() == cpu_->size() && cuda_->rank() == cpu_->rank()), kComponent,
            "the CPU and CUDA groups disagree on rank or size");
}

bool RoutingProcessGroup::matches_by_tag(DeviceType device) const {
  const Route r = route_for(Device{device, 0}, cuda_ != nullptr);
  return r == Route::Cuda ? cuda_->matches_by_tag(device) : cpu_->matches_by_tag(DeviceType::CPU);
}

bool RoutingProcessGroup::accepts_device(Device device) const {
  switch (route_for(device, cuda_ != nullptr)) {
    case Route::Cpu:
      return cpu_->accepts_device(device);
    case Route::Cuda:
      return cuda_->accepts_device(device);
    case Route::CudaStaged:
      return true;
  }
  return false;
}

void RoutingProcessGroup::abort(const std::string& reason) {
  cpu_->abort(reason);
  if (cuda_) cuda_->abort(reason);
}

std::string RoutingProcessGroup::backend_name() const {
  return fmt::format("cpu:{},cuda:{}", cpu_->backend_name(),
                     cuda_ ? cuda_->backend_name() : cpu_->backend_name());
}

Route RoutingProcessGroup::route(const char* op,
                                 std::initializer_list<const Tensor*> tensors) const {
  const Device first = (*tensors.begin())->device();
  for (const Tensor* t : tensors)
    DTENSOR_CHECK_ARG(t->device() == first, kComponent,
                      "{}: tensors on {} and {}; one device per call", op, first.str(),
                      t->device().str());
  return route_for(first, cuda_ != nullptr);
}

std::shared_ptr<Work> RoutingProcessGroup::isend(const Tensor& t, int dst, int tag) {
  counters_.bytes_sent += t.nbytes();
  counters_.messages_sent += 1;
  const Route r = route("isend", {&t});
  if (r != Route::CudaStaged) return target(r).isend(t, dst, tag);
  Tensor host = t.to(Device::cpu());
  return std::make_shared<StagedWork>(cpu_->isend(host, dst, tag), host, Tensor());
}

std::shared_ptr<Work> RoutingProcessGroup::irecv(const Tensor& t, int src, int tag) {
  counters_.bytes_received += t.nbytes();
  const Route r = route("irecv", {&t});
  if (r != Route::CudaStaged) return target(r).irecv(t, src, tag);
  Tensor host = host_like(t);
  return std::make_shared<StagedWork>(cpu_->irecv(host, src, tag), host, t);
}

std::vector<std::shared_ptr<Work>> RoutingProcessGroup::batch_isend_irecv(
    const std::vector<P2POp>& ops) {
  // Split by target group, keeping each batch's own order; staged operations
  // join the CPU batch with host buffers in place of the device tensors.
  std::vector<P2POp> batch[2];
  std::vector<std::size_t> index[2];
  std::vector<Tensor> device_dst(ops.size());
  std::vector<Tensor> host(ops.size());
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const P2POp& op = ops[i];
    const Route r = route("batch_isend_irecv", {&op.tensor});
    const int b = r == Route::Cuda ? 1 : 0;
    P2POp posted = op;
    if (r == Route::CudaStaged) {
      host[i] = op.kind == P2POp::Kind::Send ? op.tensor.to(Device::cpu()) : host_like(op.tensor);
      if (op.kind == P2POp::Kind::Recv) device_dst[i] = op.tensor;
      posted.tensor = host[i];
    }
    if (op.kind == P2POp::Kind::Send) {
      counters_.bytes_sent += op.tensor.nbytes();
      counters_.messages_sent += 1;
    } else {
      counters_.bytes_received += op.tensor.nbytes();
    }
    batch[b].push_back(std::move(posted));
    index[b].push_back(i);
  }
  std::vector<std::shared_ptr<Work>> works(ops.size());
  for (int b = 0; b < 2; ++b) {
    if (batch[b].empty()) continue;
    auto posted = (b == 1 ? *cuda_ : *cpu_).batch_isend_irecv(batch[b]);
    for (std::size_t k = 0; k < posted.size(); ++k) {
      const std::size_t i = index[b][k];
      works[i] = host[i].defined()
                     ? std::make_shared<StagedWork>(std::move(posted[k]), host[i], device_dst[i])
                     : std::move(posted[k]);
    }
  }
  return works;
}

void RoutingProcessGroup::allreduce(Tensor& t, ReduceOp op) {
  const Route r = route("allreduce", {&t});
  if (r != Route::CudaStaged) return target(r).allreduce(t, op);
  Tensor host = t.to(Device::cpu());
  cpu_->allreduce(host, op);
  t.copy_(host);
}

void RoutingProcessGroup::broadcast(Tensor& t, int root) {
  const Route r = route("broadcast", {&t});
  if (r != Route::CudaStaged) return target(r).broadcast(t, root);
  Tensor host = t.to(Device::cpu());
  cpu_->broadcast(host, root);
  t.copy_(host);
}

void RoutingProcessGroup::allgather(const Tensor& in, Tensor& out,
                                    const std::vector<std::int64_t>& counts) {
  const Route r = route("allgather", {&in, &out});
  if (r != Route::CudaStaged) return target(r).allgather(in, out, counts);
  Tensor host_out = host_like(out);
  cpu_->allgather(in.to(Device::cpu()), host_out, counts);
  out.copy_(host_out);
}

void RoutingProcessGroup::reduce_scatter(const Tensor& in, Tensor& out,
                                         const std::vector<std::int64_t>& counts, ReduceOp op) {
  const Route r = route("reduce_scatter", {&in, &out});
  if (r != Route::CudaStaged) return target(r).reduce_scatter(in, out, counts, op);
  Tensor host_out = host_like(out);
  cpu_->reduce_scatter(in.to(Device::cpu()), host_out, counts, op);
  out.copy_(host_out);
}

void RoutingProcessGroup::all_to_all(const Tensor& in, const std::vector<std::int64_t>& send_counts,
                                     Tensor& out, const std::vector<std::int64_t>& recv_counts) {
  const Route r = route("all_to_all", {&in, &out});
  if (r != Route::CudaStaged) return target(r).all_to_all(in, send_counts, out, recv_counts);
  Tensor host_out = host_like(out);
  cpu_->all_to_all(in.to(Device::cpu()), send_counts, host_out, recv_counts);
  out.copy_(host_out);
}

void RoutingProcessGroup::barrier() {
  // The CPU group's barrier orders the hosts; device work is ordered by each
  // backend's own waits (every collective here returns after completion).
  cpu_->barrier();
}

std::shared_ptr<ProcessGroup> RoutingProcessGroup::new_subgroup(const std::vector<int>& ranks) {
  auto cpu = cpu_->new_subgroup(ranks);
  auto cuda = cuda_ ? cuda_->new_subgroup(ranks) : nullptr;
  return std::make_shared<RoutingProcessGroup>(std::move(cpu), std::move(cuda));
}

std::shared_ptr<ProcessGroup> RoutingProcessGroup::split_groups(
    const std::vector<std::vector<int>>& groups) {
  auto cpu = cpu_->split_groups(groups);
  auto cuda = cuda_ ? cuda_->split_groups(groups) : nullptr;
  if (!cpu) return nullptr;  // in no group (both inner groups agree: same lists, same rank)
  return std::make_shared<RoutingProcessGroup>(std::move(cpu), std::move(cuda));
}

}  // namespace dtensor::detail
