// Two checks from outside the loader's own world: a file larger than a rank
// may allocate loads (only the rank's quarter is ever copied), and arrays
// written by NumPy itself (np.save, format versions 1 to 3) load.
#include <sys/resource.h>

#include <cstdlib>
#include <filesystem>
#include <new>

#include "tests/data/data_test_support.h"

using namespace dtensor;
using dtensor::testing::require_index_local;
using dtensor::testing::SharedTempDir;

DTENSOR_TEST_CASE("an array larger than a rank may allocate loads in quarters P=4", "[data][mp]",
                  4) {
  SharedTempDir dir("npy-large");
  const std::string path = dir / "large.npy";
  // 512 MiB of f32 zeros, sparse on disk: [128, 1048576] after a 128-byte v1 header.
  const std::int64_t rows = 128, cols = std::int64_t{1} << 20;
  if (get_rank() == 0) {
    testing::write_index_npy(path, {0, cols}, "<f4");
    std::string header(128, '\0');
    std::ifstream(path, std::ios::binary).read(header.data(), 128);
    header.replace(header.find("(0,"), 3, "(128,");  // keeps the 128-byte total: it had padding
    header.erase(header.rfind('\n') - 2, 2);
    std::ofstream(path, std::ios::binary).write(header.data(), 128);
    std::filesystem::resize_file(path, 128 + rows * cols * 4);
  }
  world()->barrier();
  // Private writable memory (heap, anonymous maps) capped at 384 MiB: the
  // whole array cannot be allocated, a quarter (128 MiB) can; the read-only
  // file mapping does not count.
  const rlim_t cap = rlim_t{384} << 20;
  const rlimit limit{cap, cap};
  REQUIRE(setrlimit(RLIMIT_DATA, &limit) == 0);
  REQUIRE_THROWS_AS(Tensor::empty({rows, cols}, DType::F32), std::bad_alloc);
  DeviceMesh mesh(DeviceType::CPU, {4});
  data::LoadStats stats;
  const DTensor t =
      data::load_npy_sharded(path, mesh, {Shard(0)}, {.dtype = std::nullopt, .stats = &stats});
  CHECK(t.to_local().shape() == Shape{32, cols});
  CHECK(stats.bytes_read == 32 * cols * 4);
  const float* p = t.to_local().data<float>();
  CHECK(p[0] == 0.0F);
  CHECK(p[32 * cols - 1] == 0.0F);
}

DTENSOR_TEST_CASE("arrays written by NumPy load sharded P=2", "[data][mp]", 2) {
  SharedTempDir dir("npy-numpy");
  int made = 0;
  if (get_rank() == 0) {
    // Element i is i, as testing::expected_index_local expects; NumPy
    // chooses the padding and, for a long header, version 2 itself.
    const std::string script =
        "import numpy as np, sys\n"
        "d = sys.argv[1]\n"
        "for name, dt, shape in [('a', '<f4', (5, 3, 4)), ('b', '<f8', (7, 2)), "
        "('c', '<i8', (3, 9)), ('d', '<i4', (4, 4, 3)), ('e', '<f2', (6, 5))]:\n"
        "    a = np.arange(int(np.prod(shape))).astype(dt).reshape(shape)\n"
        "    np.save(d + '/' + name + '.npy', a)\n"
        "    for v in [(1, 0), (2, 0), (3, 0)]:\n"
        "        with open(d + '/' + name + str(v[0]) + '.npy', 'wb') as f:\n"
        "            np.lib.format.write_array(f, a, version=v)\n"
        "np.save(d + '/fortran.npy', np.asfortranarray(np.zeros((3, 4), '<f4')))\n";
    std::ofstream(dir / "make.py") << script;
    made =
        std::system(
            ("/usr/bin/python3 " + dir / "make.py" + " " + dir.path() + " 2>/dev/null").c_str()) ==
        0;
  }
  Tensor flag = Tensor::full({1}, made, DType::F64);
  world()->broadcast(flag, 0);
  if (flag.item({0}) == 0.0) {
    WARN("no python3 with numpy: arrays written by NumPy not checked");
    return;
  }
  DeviceMesh mesh(DeviceType::CPU, {2});
  for (const std::string name : {"a", "b", "c", "d", "e"})
    for (const std::string v : {"", "1", "2", "3"})
      for (const Placements& p : {Placements{Shard(0)}, Placements{Shard(1)}})
        require_index_local(data::load_npy_sharded(dir / (name + v + ".npy"), mesh, p));
  CHECK_THROWS_WITH(data::load_npy_sharded(dir / "fortran.npy", mesh, {Shard(0)}),
                    Catch::Matchers::Contains("Fortran order"));
}
