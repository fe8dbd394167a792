// MPI and Gloo side by side in one run: the halo-exchange pattern (one
// message each way with each neighbour, batch_isend_irecv) from 4 KiB to
// 16 MiB, and a tensor-parallel convolution's forward over a mesh of each
// backend against the same convolution on one rank's shard alone. Blocks of
// the two backends are interleaved so that both see the same machine state;
// medians of 9 blocks are reported.
//
//   mpirun -n 2 build/bin/dtensor-bench-mpi-gloo
//
// The world group is MPI's (mpirun started the job); the Gloo group is made
// beside it over a fresh file store that rank 0 creates and names to the
// others over MPI. Needs the MPI module (libdtensor-mpi.so).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "backends/gloo/gloo_process_group.h"
#include "dtensor/dtensor.h"
#include "median.h"

namespace {

using dtensor::bench::median;

using Clock = std::chrono::steady_clock;
constexpr int kBlocks = 9;

// Seconds per call of fn, median over blocks of `iters` calls; the two
// backends' blocks alternate.
std::pair<double, double> side_by_side(dtensor::ProcessGroup& sync, int iters,
                                       const std::function<void()>& a,
                                       const std::function<void()>& b) {
  std::vector<double> ta, tb;
  for (int blk = 0; blk < kBlocks; ++blk)
    for (int which = 0; which < 2; ++which) {
      const auto& fn = which == 0 ? a : b;
      sync.barrier();
      const auto t0 = Clock::now();
      for (int i = 0; i < iters; ++i)
        fn();
      const double s = std::chrono::duration<double>(Clock::now() - t0).count() / iters;
      (which == 0 ? ta : tb).push_back(s);
    }
  return {median(ta), median(tb)};
}

void halo_exchange(dtensor::ProcessGroup& pg, std::vector<dtensor::Tensor>& send,
                   std::vector<dtensor::Tensor>& recv, const std::vector<int>& peers) {
  std::vector<dtensor::P2POp> ops;
  for (std::size_t i = 0; i < peers.size(); ++i) {
    ops.push_back(dtensor::P2POp::recv(recv[i], peers[i], 1));
    ops.push_back(dtensor::P2POp::send(send[i], peers[i], 1));
  }
  auto works = pg.batch_isend_irecv(ops);
  dtensor::wait_all(works);
}

// A fresh store directory for the Gloo group, made by rank 0 and named to
// the others over MPI.
std::string shared_store_dir(dtensor::ProcessGroup& mpi) {
  std::string dir;
  if (mpi.rank() == 0) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "dtensor-bench-XXXXXX").string();
    if (!mkdtemp(tmpl.data())) throw std::runtime_error("cannot create " + tmpl);
    dir = tmpl;
  }
  dtensor::Tensor name = dtensor::Tensor::zeros({256}, dtensor::DType::F64);
  for (std::size_t i = 0; i < dir.size() && i < 255; ++i)
    name.data<double>()[i] = static_cast<unsigned char>(dir[i]);
  mpi.broadcast(name, 0);
  dir.clear();
  for (std::int64_t i = 0; i < 256 && name.data<double>()[i] != 0; ++i)
    dir += static_cast<char>(name.data<double>()[i]);
  return dir;
}

}  // namespace

int main() {
  using namespace dtensor;
  auto mpi = init_process_group();
  const std::string dir = shared_store_dir(*mpi);
  const BackendInit gi{mpi->rank(),
                       mpi->size(),
                       mpi->rank(),
                       open_store("file:" + dir, std::chrono::seconds(60), "store"),
                       std::chrono::seconds(60),
                       "",
                       ""};
  std::shared_ptr<ProcessGroup> gloo = gloo_backend::GlooProcessGroup::create_world(gi);
  const int me = mpi->rank(), P = mpi->size();
  if (me == 0)
    std::printf("MPI and Gloo side by side, P = %d (medians of %d interleaved blocks)\n\n", P,
                kBlocks);

  // ---- halo exchange ----
  std::vector<int> peers;
  if (me > 0) peers.push_back(me - 1);
  if (me + 1 < P) peers.push_back(me + 1);
  if (me == 0)
    std::printf("%-10s %12s %12s %12s %12s\n", "halo", "gloo us", "mpi us", "gloo MB/s",
                "mpi MB/s");
  for (std::int64_t bytes : {4096L, 65536L, 1L << 20, 16L << 20}) {
    const std::int64_t n = bytes / 4;
    std::vector<Tensor> send, recv;
    for (std::size_t i = 0; i < peers.size(); ++i) {
      send.push_back(Tensor::full({n}, me + 1.0, DType::F32));
      recv.push_back(Tensor::zeros({n}, DType::F32));
    }
    const int iters = bytes >= (1 << 20) ? 5 : 50;
    const auto [tg, tm] = side_by_side(
        *mpi, iters, [&] { halo_exchange(*gloo, send, recv, peers); },
        [&] { halo_exchange(*mpi, send, recv, peers); });
    // Bytes this rank receives per exchange, over the time of one.
    const double moved = static_cast<double>(bytes * static_cast<std::int64_t>(peers.size()));
    if (me == 0)
      std::printf("%-10s %12.1f %12.1f %12.0f %12.0f\n",
                  (std::to_string(bytes / 1024) + " KiB").c_str(), tg * 1e6, tm * 1e6,
                  moved / tg / 1e6, moved / tm / 1e6);
  }

  // ---- convolution forward: distributed over each backend vs one shard alone ----
  const Shape in_shape{2, 32, 128, 128};
  const Tensor image = Tensor::rand(in_shape, DType::F32, 1);
  const Tensor filter = Tensor::rand({32, 32, 3, 3}, DType::F32, 2);
  const ConvParams p{.stride = {1}, .padding = {{1, 1}}, .dilation = {1}, .groups = 1};
  std::vector<int> all(static_cast<std::size_t>(P));
  for (int r = 0; r < P; ++r)
    all[r] = r;
  DeviceMesh mesh_gloo(DeviceType::CPU, {P}, all, gloo);
  DeviceMesh mesh_mpi(DeviceType::CPU, {P}, all, mpi);
  DTensor xg = distribute_tensor(image, mesh_gloo, {Shard(2)});
  DTensor wg = distribute_tensor(filter, mesh_gloo, {Replicate()});
  DTensor xm = distribute_tensor(image, mesh_mpi, {Shard(2)});
  DTensor wm = distribute_tensor(filter, mesh_mpi, {Replicate()});
  // The local yardstick: this rank's shard convolved alone (a mesh of one).
  DeviceMesh alone(DeviceType::CPU, {1}, {me}, mpi);
  DTensor xl = DTensor::from_local(xm.to_local(), alone, {Replicate()});
  DTensor wl = DTensor::from_local(wm.to_local(), alone, {Replicate()});
  auto conv_gloo = [&] { convolution(xg, wg, std::nullopt, p); };
  auto conv_mpi = [&] { convolution(xm, wm, std::nullopt, p); };
  auto conv_local = [&] { convolution(xl, wl, std::nullopt, p); };
  const auto [tg, tm] = side_by_side(*mpi, 3, conv_gloo, conv_mpi);
  const auto [tl, tl2] = side_by_side(*mpi, 3, conv_local, conv_local);
  const double local = std::min(tl, tl2);
  if (me == 0) {
    std::printf("\nconv 3x3 32->32 %s f32, H sharded over P = %d: forward\n",
                shape_str(in_shape).c_str(), P);
    std::printf(
        "  gloo %.2f ms (overhead %.2f)   mpi %.2f ms (overhead %.2f)   local shard %.2f "
        "ms\n",
        tg * 1e3, tg / local, tm * 1e3, tm / local, local * 1e3);
  }
  gloo->barrier();
  gloo.reset();
  if (me == 0) std::filesystem::remove_all(dir);
  destroy_process_group();
}
