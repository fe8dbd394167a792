// Redistribute overhead: DTensor::redistribute S(0)->R and P(sum)->R of a
// 64 MiB tensor against the bare collective on the same group (allgather /
// allreduce of the same bytes), interleaved in one run. Run with P = 2:
//
//   dtensor-run -n 2 -- build/bin/dtensor-bench-redistribute [--mib 64] [--rounds 7]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <dtensor/dtensor.h>

#include "median.h"

using namespace dtensor;
using Clock = std::chrono::steady_clock;

namespace {

using dtensor::bench::median;
template <typename F>
double time_ms(ProcessGroup& pg, F&& f) {
  pg.barrier();
  const auto t = Clock::now();
  f();
  pg.barrier();
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}
}  // namespace

int main(int argc, char** argv) try {
  std::int64_t mib = 64, rounds = 7;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--mib") mib = std::atoll(argv[i + 1]);
    if (a == "--rounds") rounds = std::atoll(argv[i + 1]);
  }
  auto pg = init_process_group();
  const int P = pg->size();
  DeviceMesh mesh(DeviceType::CPU, {P});
  const std::int64_t n = mib * 1048576 / 4, cols = 1024, rows = n / cols;
  const DTensorSpec sspec(mesh, {Shard(0)}, {rows, cols}, DType::F32);
  DTensor s(
      Tensor::rand_slice({rows, cols}, sspec.global_offset(), sspec.local_shape(), DType::F32, 1),
      sspec);
  DTensor p = DTensor::from_local(Tensor::rand({rows, cols}, DType::F32, 2), mesh, {Partial()},
                                  Shape{rows, cols});
  std::vector<std::int64_t> counts;
  for (int q = 0; q < P; ++q)
    counts.push_back(chunk_extent(rows, P, q).length * cols);
  Tensor gathered = Tensor::empty({n}, DType::F32);
  Tensor reduced = Tensor::rand({n}, DType::F32, 3);
  std::vector<double> sr, sr_bare, pr, pr_bare;
  for (int r = 0; r < rounds + 1; ++r) {  // round 0 warms up
    const bool keep = r > 0;
    const double a = time_ms(*pg, [&] { s.redistribute(mesh, {Replicate()}); });
    const double b = time_ms(
        *pg, [&] { pg->allgather(s.to_local().view({s.to_local().numel()}), gathered, counts); });
    const double c = time_ms(*pg, [&] { p.redistribute(mesh, {Replicate()}); });
    const double d = time_ms(*pg, [&] {
      Tensor t = reduced.clone();  // redistribute never modifies its input: it copies too
      pg->allreduce(t);
    });
    const double e = time_ms(*pg, [&] {
      Tensor fresh = Tensor::empty({n}, DType::F32);
      pg->allgather(s.to_local().view({s.to_local().numel()}), fresh, counts);
    });
    if (keep && pg->rank() == 0) std::printf("fresh-buffer allgather %.1f ms\n", e);
    if (keep) {
      sr.push_back(a);
      sr_bare.push_back(b);
      pr.push_back(c);
      pr_bare.push_back(d);
    }
  }
  if (pg->rank() == 0) {
    std::printf("redistribute of %lld MiB f32 at P=%d, medians of %lld rounds\n",
                static_cast<long long>(mib), P, static_cast<long long>(rounds));
    std::printf("%-10s %12s %12s %8s\n", "transition", "DTensor ms", "bare ms", "ratio");
    std::printf("%-10s %12.1f %12.1f %8.3f\n", "S(0)->R", median(sr), median(sr_bare),
                median(sr) / median(sr_bare));
    std::printf("%-10s %12.1f %12.1f %8.3f\n", "P(sum)->R", median(pr), median(pr_bare),
                median(pr) / median(pr_bare));
  }
  destroy_process_group();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench failed: %s\n", e.what());
  return 1;
}
