// Built against the installed package only: distributes an image batch over
// 2 ranks (W sharded), convolves it, gathers the result and compares it with
// the same convolution on a replicated copy.
#include <cstdio>

#include <dtensor/dtensor.h>

int main() try {
  using namespace dtensor;
  init_process_group();
  DeviceMesh mesh(DeviceType::CPU, {get_world_size()});
  const Tensor image = Tensor::rand({2, 3, 10, 13}, DType::F64, 1);
  const Tensor filter = Tensor::rand({4, 3, 3, 3}, DType::F64, 2);
  const ConvParams params{.stride = {1}, .padding = {{1, 1}}, .dilation = {1}, .groups = 1};

  DTensor x = distribute_tensor(image, mesh, {Shard(3)});
  DTensor w = distribute_tensor(filter, mesh, {Replicate()});
  Tensor sharded = convolution(x, w, std::nullopt, params).full_tensor();

  DTensor x_rep = distribute_tensor(image, mesh, {Replicate()});
  Tensor replicated = convolution(x_rep, w, std::nullopt, params).to_local();

  const double err = max_abs_diff(sharded, replicated);
  std::printf("libdtensor %s rank %d/%d: output %s, max |sharded - replicated| = %.2e\n",
              version().c_str(), get_rank(), get_world_size(), shape_str(sharded.shape()).c_str(),
              err);
  destroy_process_group();
  return err < 1e-12 ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "consumer failed: %s\n", e.what());
  return 1;
}
