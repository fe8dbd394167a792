#include <cstdio>

#include <dtensor/dtensor.h>
using namespace dtensor;

int run() {
  init_process_group();                      // rank, world size, store: from dtensor-run
  DeviceMesh mesh(DeviceType::CPU, {2, 2});  // 4 ranks as a 2x2 grid
  // Seeded, so every rank can make the same tensors; rank 0's copy is the one sent.
  Tensor image = Tensor::rand({8, 16, 64, 64}, DType::F32, /*seed=*/1);
  Tensor filter = Tensor::rand({16, 16, 3, 3}, DType::F32, /*seed=*/2);

  DTensor x = distribute_tensor(image, mesh, {Shard(2), Shard(3)});  // H on mesh dim 0, W on 1
  DTensor w = distribute_tensor(filter, mesh, {Replicate(), Replicate()});
  ConvParams p{.stride = {1}, .padding = {{1, 1}}, .dilation = {1}, .groups = 1};
  DTensor y = relu(convolution(x, w, std::nullopt, p));  // halo exchange; stays S(2),S(3)
  double m = mean(y).full_tensor().item({});             // Partial(sum) until here: one all-reduce
  DTensor rows = y.redistribute(mesh, {Shard(0), Replicate()});  // batch-sharded instead
  Tensor full = y.full_tensor();  // gathered: the single-process result

  if (get_rank() == 0)
    std::printf("y %s: local %s as %s, %s as %s; mean %.6f\n", shape_str(full.shape()).c_str(),
                shape_str(y.to_local().shape()).c_str(), placements_str(y.placements()).c_str(),
                shape_str(rows.to_local().shape()).c_str(),
                placements_str(rows.placements()).c_str(), m);
  destroy_process_group();
  return 0;
}

int main() {
  try {
    return run();
  } catch (const std::exception& e) {  // a bad setting, the store, a failed peer: named in e.what()
    std::fprintf(stderr, "quickstart: %s\n", e.what());
    return 1;
  }
}
