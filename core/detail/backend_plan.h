// Which process-group backend serves which device's tensors (the backend
// string of InitOptions, see docs/backends-cuda.md). A pure function of the
// string and the number of visible GPUs, so every rank decides alike and the
// decision is unit-tested without a GPU.
#pragma once

#include <string>
#include <string_view>

namespace dtensor::detail {

struct BackendPlan {
  std::string cpu;   // backend for CPU tensors (always set)
  std::string cuda;  // backend for CUDA tensors; "" = not routed (one plain backend)
  bool routed() const { return !cuda.empty(); }
  /// CUDA tensors go through the CPU backend, copied via host memory.
  bool cuda_staged() const { return routed() && cuda == cpu; }
  /// "gloo", or "cpu:gloo,cuda:nccl".
  std::string str() const;
};

/// Parses "NAME", "nccl", "auto", or "cpu:NAME,cuda:NAME" (either part may be
/// left out: cpu defaults to gloo, cuda to none). InvalidArgument names the fault.
BackendPlan plan_backends(std::string_view spec, int cuda_device_count);

}  // namespace dtensor::detail
