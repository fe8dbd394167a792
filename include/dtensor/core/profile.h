// Where this rank's time goes, call by call: the wall time inside each
// outermost communicating call (an operator's dispatch, its backward, a
// redistribute, full_tensor, a DeviceMesh's own collectives) and, of it, the
// time this rank stood blocked in communication (collectives, and waits on
// point-to-point messages, posting them included). A spatially parallel step is slower than the
// shard alone by its extra work and by its waits for the slower rank; the
// two columns tell them apart (docs/performance.md measured the U-Net step
// this way).
//
// Off by default: then a call costs one relaxed load more. DTENSOR_PROFILE=on
// turns it on at init_process_group and prints each rank's table to stderr
// at destroy_process_group (at exit, for a program that never calls it);
// set_operator_profiling() turns it on or off from code. Counts only calls
// made on a thread with no outer call open, as the desync check numbers them
// (dtensor/core/comm_scope.h).
//
// The same switch times the local kernels (dtensor/ops/kernel.h): each
// kernel slot's calls, and each operator's default-path kernel, per device
// type and dtype. What a call does inside, a fused chain's convolutions and
// norms for one, shows there.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dtensor/core/dtype.h"

namespace dtensor {

/// One row of a rank's profile: every outermost call of that name.
struct OperatorTime {
  std::string op;
  std::int64_t calls = 0;
  /// Wall time inside the calls.
  double seconds = 0;
  /// Of it, inside communication: collectives, posting messages and waiting
  /// for them (a rank ahead waits here for the others). In the row
  /// "(outside calls)": communication made outside any call (a ProcessGroup
  /// used directly), where `calls` is 0. Timed by the layer that watches
  /// for failed ranks (which a job without a fault monitor, backend mpi
  /// without a store, has too, without the watching).
  double comm_seconds = 0;
};

/// One row of a rank's kernel profile: every call of one kernel (a kernel
/// slot's, e.g. "norm.apply", or an operator's default-path kernel, by the
/// operator's name) on one device type and dtype, made outside another
/// kernel (a kernel that runs another is counted once, whole).
struct KernelTime {
  std::string kernel;
  DeviceType device = DeviceType::CPU;
  DType dtype = DType::F32;
  std::int64_t calls = 0;
  /// Wall time on the calling thread. A CUDA kernel's is what it took the
  /// host: the launch, unless the kernel waits for the device.
  double seconds = 0;
};

/// Turns timing on or off (what was counted stays until reset).
void set_operator_profiling(bool on);
bool operator_profiling();
/// This rank's rows since profiling began or the last reset, the most time
/// first (ties by name).
std::vector<OperatorTime> operator_profile();
/// This rank's kernel rows since profiling began or the last reset, the most
/// time first (ties by name, device, dtype).
std::vector<KernelTime> kernel_profile();
/// Forgets both profiles.
void reset_operator_profile();
/// The rows as a text table: op, calls, ms, ms in communication and the
/// share of the total time; a last line with the totals.
std::string format_operator_profile(const std::vector<OperatorTime>& rows);
/// The kernel rows as a text table: kernel, device, dtype, calls, ms and the
/// share of the kernels' total; a last line with the totals.
std::string format_kernel_profile(const std::vector<KernelTime>& rows);

namespace detail {
/// Times one kernel call while profiling is on (run_kernel and dispatch's
/// default path open one around the kernel); `kernel` must outlive it.
class KernelTimer {
 public:
  KernelTimer(const char* kernel, DeviceType device, DType dtype);
  ~KernelTimer();
  KernelTimer(const KernelTimer&) = delete;
  KernelTimer& operator=(const KernelTimer&) = delete;

 private:
  const char* kernel_;
  DeviceType device_;
  DType dtype_;
  bool counted_ = false;        // opened with profiling on
  std::int64_t start_ns_ = -1;  // the outermost kernel on its thread: timed
};
}  // namespace detail

}  // namespace dtensor
