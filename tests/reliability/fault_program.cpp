// A small libdtensor program for launcher-level fault tests and the
// two-namespace test: every rank runs one kind of work in a loop, and one rank
// (the victim) can be made to die (SIGKILL) or stall at a chosen moment.
//
//   fault_program MODE [--victim R] [--kill-after-ms T | --stall-after-ms T]
//                      [--late-ms T] [--seconds S] [--width W]
//   MODE: conv          convolution on S(3) (a halo exchange) in a loop
//         redistribute  S(0) -> R -> S(0) in a loop
//         allreduce     world allreduce in a loop
//         rendezvous    the victim dies T ms into init_process_group
//         conv-check    one convolution on S(3), compared with the f64 oracle
//         exit-live     conv-check, then return from main without
//                       destroy_process_group(): the library's static
//                       destructors end the world group
//   --late-ms T: the victim starts init_process_group T ms late, so that the
//   others wait in their rendezvous that long, their ports open.
//
// Every rank prints "pid=N" first (the tests check that no process is left).
// A rank that catches a libdtensor error prints
// "rank R raised TYPE after X s: MESSAGE" and exits with kRaisedExit, so the
// tests can tell "raised a typed error" from a crash or a kill.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <typeinfo>

#include "dtensor/dtensor.h"
#include "tools/reference/reference_conv.h"

using namespace dtensor;
using namespace std::chrono_literals;

namespace {

constexpr int kRaisedExit = 3;
constexpr int kUsageExit = 2;

struct Args {
  std::string mode;
  int victim = -1;
  int kill_after_ms = -1;
  int stall_after_ms = -1;
  int late_ms = 0;
  double seconds = 30;
  std::int64_t width = 4096;
};

Args parse(int argc, char** argv) {
  Args a;
  if (argc < 2) {
    std::fprintf(stderr, "usage: fault_program MODE [options]\n");
    std::exit(kUsageExit);
  }
  a.mode = argv[1];
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const char* v = argv[i + 1];
    if (k == "--victim")
      a.victim = std::atoi(v);
    else if (k == "--kill-after-ms")
      a.kill_after_ms = std::atoi(v);
    else if (k == "--stall-after-ms")
      a.stall_after_ms = std::atoi(v);
    else if (k == "--late-ms")
      a.late_ms = std::atoi(v);
    else if (k == "--seconds")
      a.seconds = std::atof(v);
    else if (k == "--width")
      a.width = std::atoll(v);
    else {
      std::fprintf(stderr, "fault_program: unknown option %s\n", k.c_str());
      std::exit(kUsageExit);
    }
  }
  return a;
}

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

const char* type_name(const Error& e) {
  if (dynamic_cast<const TimeoutError*>(&e)) return "TimeoutError";
  if (dynamic_cast<const CommError*>(&e)) return "CommError";
  if (dynamic_cast<const InvalidArgument*>(&e)) return "InvalidArgument";
  if (dynamic_cast<const NotSupported*>(&e)) return "NotSupported";
  return "Error";
}

// The victim dies from a thread, wherever its main thread happens to be.
void arm_kill(int after_ms) {
  std::thread([after_ms] {
    std::this_thread::sleep_for(std::chrono::milliseconds(after_ms));
    raise(SIGKILL);
  }).detach();
}

ConvParams conv_params() {
  ConvParams p;
  p.stride = {1, 1};
  p.padding = {{1, 1}, {1, 1}};
  p.dilation = {1, 1};
  return p;
}

int run(const Args& a, int rank) {
  const bool victim = rank == a.victim;
  if (victim && a.late_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(a.late_ms));
  if (a.mode == "rendezvous") {
    if (victim) arm_kill(std::max(a.kill_after_ms, 0));
    init_process_group();
    // Survivors whose rendezvous succeeded (the victim got far enough) go on
    // to a collective, which must fail too.
    Tensor t = Tensor::full({16}, 1.0, DType::F32);
    const auto t0 = std::chrono::steady_clock::now();
    while (since(t0) < a.seconds)
      world()->allreduce(t);
    return 0;
  }
  init_process_group();
  const int world_size = get_world_size();
  if (victim && a.kill_after_ms >= 0) arm_kill(a.kill_after_ms);
  DeviceMesh mesh(DeviceType::CPU, {world_size});
  const auto t0 = std::chrono::steady_clock::now();
  auto maybe_stall = [&] {
    if (victim && a.stall_after_ms >= 0 && since(t0) * 1000 >= a.stall_after_ms) {
      std::printf("rank %d stalls\n", rank);
      std::fflush(stdout);
      std::this_thread::sleep_for(std::chrono::hours(1));
    }
  };
  if (a.mode == "conv" || a.mode == "conv-check" || a.mode == "exit-live") {
    const Shape xs{1, 2, 6, a.width}, ws{3, 2, 3, 3};
    const Tensor X = Tensor::rand(xs, DType::F64, 11);
    const Tensor W = Tensor::rand(ws, DType::F64, 12);
    const Tensor B = Tensor::rand({3}, DType::F64, 13);
    auto x = distribute_tensor(X, mesh, {Shard(3)});
    auto w = distribute_tensor(W, mesh, {Replicate()});
    auto b = distribute_tensor(B, mesh, {Replicate()});
    if (a.mode != "conv") {
      const Tensor y = convolution(x, w, b, conv_params()).full_tensor();
      const Tensor ref = reference::ref_conv_forward(X, W, B, conv_params());
      const double err = max_abs_diff(y, ref);
      std::printf("rank %d conv-check max_err=%.3g %s\n", rank, err, err < 1e-10 ? "ok" : "WRONG");
      std::fflush(stdout);
      if (a.mode == "conv-check") destroy_process_group();
      return err < 1e-10 ? 0 : 1;
    }
    while (since(t0) < a.seconds) {
      maybe_stall();
      auto y = convolution(x, w, b, conv_params());
    }
  } else if (a.mode == "redistribute") {
    auto x =
        distribute_tensor(Tensor::rand({world_size * 64, 512}, DType::F32, 5), mesh, {Shard(0)});
    while (since(t0) < a.seconds) {
      maybe_stall();
      x = x.redistribute(mesh, {Replicate()}).redistribute(mesh, {Shard(0)});
    }
  } else if (a.mode == "allreduce") {
    Tensor t = Tensor::full({1 << 18}, 1.0, DType::F32);
    while (since(t0) < a.seconds) {
      maybe_stall();
      world()->allreduce(t, ReduceOp::Max);
    }
  } else {
    std::fprintf(stderr, "fault_program: unknown mode '%s'\n", a.mode.c_str());
    return kUsageExit;
  }
  std::printf("rank %d done\n", rank);
  destroy_process_group();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  // The rank is needed before init_process_group (a late or killed victim):
  // dtensor-run's variable, or OpenMPI's under mpirun.
  const char* r = std::getenv("DTENSOR_RANK");
  if (r == nullptr) r = std::getenv("OMPI_COMM_WORLD_RANK");
  const int rank = r ? std::atoi(r) : 0;
  std::printf("pid=%d\n", static_cast<int>(getpid()));
  std::fflush(stdout);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    return run(a, rank);
  } catch (const Error& e) {
    std::printf("rank %d raised %s after %.2f s: %s\n", rank, type_name(e), since(t0), e.what());
    std::fflush(stdout);
    destroy_process_group();
    return kRaisedExit;
  }
}
