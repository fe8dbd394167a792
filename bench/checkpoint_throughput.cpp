// Checkpoint save and load throughput against the disk's own sequential
// write (and read) speed, measured in the same run on the same bytes: each
// rank writes its share of the data to a plain file and fsyncs it, as a save
// does, so the ratio says what the format, checksums and commit protocol cost.
//
//   dtensor-run -n 2 build/bin/dtensor-bench-checkpoint [--mb 256] [--reps 3] [--dir DIR] [--json]
//
// One f32 tensor of MB megabytes, Shard(0) over all ranks, saved to and
// loaded from DIR (default: a fresh directory under the temp dir). Throughput
// is bytes / wall time between barriers; medians of the repetitions. The
// reads (load and raw) come mostly from the page cache: the file was just
// written and nothing here may drop it.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "dtensor/dtensor.h"
#include "median.h"

namespace {

using dtensor::bench::median;

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;
using namespace dtensor;

double seconds_between_barriers(const std::function<void()>& f) {
  world()->barrier();
  const auto t0 = Clock::now();
  f();
  world()->barrier();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// What a save's disk work is at its least: write the bytes, fsync.
void raw_write(const std::string& path, const Tensor& t) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error("bench", "cannot create " + path);
  const char* p = static_cast<const char*>(t.data_ptr());
  std::size_t left = t.nbytes();
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n <= 0) throw Error("bench", "cannot write " + path);
    p += n;
    left -= static_cast<std::size_t>(n);
  }
  ::fsync(fd);
  ::close(fd);
}

void raw_read(const std::string& path, Tensor& t) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error("bench", "cannot open " + path);
  char* p = static_cast<char*>(t.data_ptr());
  std::size_t left = t.nbytes(), at = 0;
  while (left > 0) {
    const ssize_t n = ::pread(fd, p + at, left, static_cast<off_t>(at));
    if (n <= 0) break;
    at += static_cast<std::size_t>(n);
    left -= static_cast<std::size_t>(n);
  }
  ::close(fd);
}

}  // namespace

int main(int argc, char** argv) {
  double mb = 256;
  int reps = 3;
  bool as_json = false;
  std::string dir;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--mb") && i + 1 < argc)
      mb = std::atof(argv[++i]);
    else if (!std::strcmp(argv[i], "--reps") && i + 1 < argc)
      reps = std::max(1, std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--dir") && i + 1 < argc)
      dir = argv[++i];
    else if (!std::strcmp(argv[i], "--json"))
      as_json = true;
  }
  init_process_group();
  const int P = get_world_size(), rank = get_rank();
  bool own_dir = dir.empty();
  if (own_dir) {
    Tensor id = Tensor::full({1}, static_cast<double>(::getpid()), DType::F64);
    world()->broadcast(id, 0);
    dir = (fs::temp_directory_path() /
           ("dtensor-bench-ckpt-" + std::to_string(static_cast<long>(id.item({0})))))
              .string();
  }
  if (rank == 0) fs::create_directories(dir);
  world()->barrier();

  const std::int64_t cols = 1024;
  const auto rows =
      std::max<std::int64_t>(P, static_cast<std::int64_t>(mb * 1048576.0 / (4.0 * cols)));
  const Shape shape{rows, cols};
  DeviceMesh mesh(DeviceType::CPU, {P});
  DTensorSpec spec(mesh, {Shard(0)}, shape, DType::F32);
  DTensor w(Tensor::rand_slice(shape, spec.global_offset(), spec.local_shape(), DType::F32, 1),
            spec);
  const double total_mb = static_cast<double>(rows * cols * 4) / 1048576.0;
  const std::string raw = dir + "/raw-rank" + std::to_string(rank) + ".bin";
  Tensor back = Tensor::empty(spec.local_shape(), DType::F32);

  std::vector<double> t_raw_w, t_raw_r, t_save, t_load;
  for (int i = 0; i < reps; ++i) {
    t_raw_w.push_back(seconds_between_barriers([&] { raw_write(raw, w.to_local()); }));
    t_raw_r.push_back(seconds_between_barriers([&] { raw_read(raw, back); }));
    t_save.push_back(seconds_between_barriers([&] { save_checkpoint({{"w", w}}, dir + "/ckpt"); }));
    t_load.push_back(seconds_between_barriers([&] {
      load_checkpoint(dir + "/ckpt", {{"w", spec}});
    }));
  }
  const double raw_w = total_mb / median(t_raw_w), raw_r = total_mb / median(t_raw_r);
  const double save = total_mb / median(t_save), load = total_mb / median(t_load);
  if (rank == 0) {
    if (as_json)
      std::printf(
          "{\"P\": %d, \"mb\": %.1f, \"save_mb_s\": %.1f, \"load_mb_s\": %.1f, "
          "\"raw_write_mb_s\": %.1f, \"raw_read_mb_s\": %.1f, \"save_vs_raw_write\": "
          "%.3f, \"load_vs_raw_read\": %.3f}\n",
          P, total_mb, save, load, raw_w, raw_r, save / raw_w, load / raw_r);
    else
      std::printf(
          "checkpoint of %.1f MB on %d ranks (median of %d):\n"
          "  save %8.1f MB/s   raw write+fsync %8.1f MB/s   ratio %.3f\n"
          "  load %8.1f MB/s   raw pread       %8.1f MB/s   ratio %.3f\n",
          total_mb, P, reps, save, raw_w, save / raw_w, load, raw_r, load / raw_r);
    std::fflush(stdout);
  }
  world()->barrier();
  if (own_dir && rank == 0)
    fs::remove_all(dir);
  else if (!own_dir)
    fs::remove(raw);
  destroy_process_group();
  return 0;
}
