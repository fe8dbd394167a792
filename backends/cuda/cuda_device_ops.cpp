// Tensor data movement on CUDA tensors (the core's DeviceOps hook): host <->
// device copies, strided device copies with dtype conversion, fill and add.
// Everything runs on the library's stream of the device; a copy to the host
// returns when the data is there.
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <set>

#include <fmt/format.h>

#include "backends/cuda/cuda_context.h"
#include "backends/cuda/cuda_errors.h"
#include "backends/cuda/elementwise.h"
#include "backends/cuda/module_registration.h"
#include "core/detail/device_ops.h"
#include "dtensor/core/tensor.h"

namespace dtensor::cuda_backend {
namespace {

ElemType elem(DType t) {
  // The device kernels (strided and converting copies, fill, add) are
  // floating; I64 moves only as dense same-dtype copies (cudaMemcpy).
  if (t == DType::I64)
    throw NotSupported("cuda",
                       "i64 tensors are copied on CUDA only densely and without "
                       "conversion (no strided copy, conversion, fill or add)");
  static_assert(static_cast<int>(DType::BF16) == static_cast<int>(ElemType::BF16) &&
                static_cast<int>(DType::F16) == static_cast<int>(ElemType::F16));
  return static_cast<ElemType>(static_cast<int>(t));
}

bool dense_same(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.is_contiguous() && b.is_contiguous();
}

// dst <- src, both on the same device (strided, converting).
void device_to_device(const Tensor& dst, const Tensor& src) {
  const int dev = dst.device().index;
  DeviceGuard guard(dev);
  cudaStream_t s = stream_for(dev);
  if (dense_same(dst, src)) {
    check_cuda(
        cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), dst.nbytes(), cudaMemcpyDeviceToDevice, s),
        "copy_ device to device");
    return;
  }
  check_cuda(launch_copy(dst.data_ptr(), elem(dst.dtype()), src.data_ptr(), elem(src.dtype()),
                         make_layout(dst.shape(), dst.strides(), src.strides()), s),
             "copy_ kernel");
}

void host_to_device(const Tensor& dst, const Tensor& src) {
  // Convert and densify on the host first, so one memcpy crosses the bus.
  Tensor h = src;
  if (!(src.is_contiguous() && src.dtype() == dst.dtype())) {
    h = Tensor::empty(src.shape(), dst.dtype(), Device::cpu());
    h.copy_(src);
  }
  const int dev = dst.device().index;
  DeviceGuard guard(dev);
  cudaStream_t s = stream_for(dev);
  Tensor d = dst.is_contiguous() ? dst : Tensor::empty(dst.shape(), dst.dtype(), dst.device());
  check_cuda(cudaMemcpyAsync(d.data_ptr(), h.data_ptr(), d.nbytes(), cudaMemcpyHostToDevice, s),
             "copy_ host to device");
  if (!d.shares_storage_with(dst)) device_to_device(dst, d);
  // The host buffer may be freed when we return.
  check_cuda(cudaStreamSynchronize(s), "copy_ host to device (synchronize)");
}

void device_to_host(const Tensor& dst, const Tensor& src) {
  const int dev = src.device().index;
  DeviceGuard guard(dev);
  cudaStream_t s = stream_for(dev);
  Tensor d = src;
  if (!(src.is_contiguous() && src.dtype() == dst.dtype())) {
    d = Tensor::empty(src.shape(), dst.dtype(), src.device());
    device_to_device(d, src);
  }
  Tensor h = dst.is_contiguous() ? dst : Tensor::empty(dst.shape(), dst.dtype(), Device::cpu());
  check_cuda(cudaMemcpyAsync(h.data_ptr(), d.data_ptr(), h.nbytes(), cudaMemcpyDeviceToHost, s),
             "copy_ device to host");
  check_cuda(cudaStreamSynchronize(s), "copy_ device to host (synchronize)");
  if (!h.shares_storage_with(dst)) Tensor(dst).copy_(h);
}

// The devices this process has allocated on, for cached_bytes().
std::mutex& allocated_mutex() {
  static std::mutex m;
  return m;
}
std::set<int>& allocated_devices() {
  static std::set<int> d;
  return d;
}
std::set<int> devices_allocated_on() {
  std::lock_guard lock(allocated_mutex());
  return allocated_devices();
}

class CudaDeviceOps final : public detail::DeviceOps {
 public:
  void copy(const Tensor& dst, const Tensor& src) override {
    if (dst.numel() == 0) return;
    const Device dd = dst.device(), sd = src.device();
    if (dd.is_cuda() && sd.is_cuda()) {
      if (dd == sd) return device_to_device(dst, src);
      // Across GPUs: a dense copy of src moves peer to peer, then converts.
      Tensor dense = src.contiguous();
      Tensor there = Tensor::empty(src.shape(), src.dtype(), dd);
      check_cuda(cudaMemcpyPeerAsync(there.data_ptr(), dd.index, dense.data_ptr(), sd.index,
                                     dense.nbytes(), stream_for(sd.index)),
                 "copy_ between devices");
      check_cuda(cudaStreamSynchronize(stream_for(sd.index)), "copy_ between devices");
      return device_to_device(dst, there);
    }
    if (dd.is_cuda()) return host_to_device(dst, src);
    return device_to_host(dst, src);
  }

  void fill(const Tensor& dst, double value) override {
    if (dst.numel() == 0) return;
    const int dev = dst.device().index;
    DeviceGuard guard(dev);
    if (value == 0.0 && dst.is_contiguous()) {
      check_cuda(cudaMemsetAsync(dst.data_ptr(), 0, dst.nbytes(), stream_for(dev)), "zero_");
      return;
    }
    check_cuda(launch_fill(dst.data_ptr(), elem(dst.dtype()), value,
                           make_layout(dst.shape(), dst.strides(), dst.strides()), stream_for(dev)),
               "fill_ kernel");
  }

  void add(const Tensor& dst, const Tensor& src) override {
    if (dst.numel() == 0) return;
    const int dev = dst.device().index;
    DeviceGuard guard(dev);
    check_cuda(launch_add(dst.data_ptr(), src.data_ptr(), elem(dst.dtype()),
                          make_layout(dst.shape(), dst.strides(), src.strides()), stream_for(dev)),
               "add_ kernel");
  }

  int device_count() override { return cuda_backend::device_count(); }
  std::string unavailable_reason() override {
    std::string reason;
    cuda_backend::device_count(&reason);
    return reason;
  }
  int current_device() override { return cuda_backend::device_count() > 0 ? default_device() : 0; }
  void set_device(int index) override { set_default_device(index); }
  void synchronize() override {
    const int dev = default_device();
    DeviceGuard guard(dev);
    check_cuda(cudaStreamSynchronize(stream_for(dev)), fmt::format("synchronize cuda:{}", dev));
  }
  void select_local_device(int local_rank) override { set_local_rank(local_rank); }

  // Reserved minus used of each device's default pool (where cudaMallocAsync
  // allocates), over the devices this process has allocated on.
  std::size_t cached_bytes() override {
    std::size_t cached = 0;
    for (const int dev : devices_allocated_on()) {
      DeviceGuard guard(dev);
      cudaMemPool_t pool = nullptr;
      std::uint64_t reserved = 0, used = 0;
      if (cudaDeviceGetDefaultMemPool(&pool, dev) != cudaSuccess ||
          cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved) !=
              cudaSuccess ||
          cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used) != cudaSuccess) {
        cudaGetLastError();  // a statistic: clear the error, count nothing
        continue;
      }
      cached += static_cast<std::size_t>(reserved > used ? reserved - used : 0);
    }
    return cached;
  }
};

std::shared_ptr<Storage> allocate(std::size_t nbytes, Device device) {
  std::string reason;
  const int n = device_count(&reason);
  if (n == 0) throw NotSupported("cuda", fmt::format("allocating on {}: {}", device.str(), reason));
  DTENSOR_CHECK_ARG(device.index >= 0 && device.index < n, "cuda", "{}: only {} device(s)",
                    device.str(), n);
  DeviceGuard guard(device.index);
  cudaStream_t s = stream_for(device.index);
  void* p = nullptr;
  // Stream-ordered: freeing is ordered after the work already queued on the
  // stream, so a tensor may go away while a kernel or NCCL call still reads it.
  if (nbytes > 0)
    check_cuda(cudaMallocAsync(&p, nbytes, s),
               fmt::format("allocating {} bytes on {}", nbytes, device.str()));
  const int dev = device.index;
  {
    std::lock_guard lock(allocated_mutex());
    allocated_devices().insert(dev);
  }
  return std::make_shared<Storage>(p, nbytes, device, [dev, s](void* q) {
    if (!q) return;
    int prev = 0;
    cudaGetDevice(&prev);
    cudaSetDevice(dev);
    cudaFreeAsync(q, s);  // errors at process exit (runtime unloading) are ignored
    cudaSetDevice(prev);
  });
}

}  // namespace

// Registration only: no CUDA call happens while the module loads.
void register_device_ops_and_allocator() {
  detail::register_device_ops(DeviceType::CUDA, std::make_shared<CudaDeviceOps>());
  Storage::set_device_allocator(DeviceType::CUDA, allocate);
}

}  // namespace dtensor::cuda_backend
