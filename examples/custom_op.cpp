// Two operators of the program's own, registered at start-up and dispatched
// like the built-in ones:
//
//  - my::square (x*x): an OpDef with sharding signatures and a local kernel.
//    The default path does the rest: a Partial input is reduced first
//    (squaring is not linear), any shard or replica is squared in place.
//  - my::normalize (x / max|x|): a custom handler, because it needs a value
//    no shard knows alone. It computes its local max, all-reduces it over the
//    mesh, and scales with the built-in `scale` (a handler may dispatch).
//
// Run: dtensor-run -n 4 -- dtensor-example-custom-op
#include <algorithm>
#include <cmath>
#include <cstdio>

#include <dtensor/dtensor.h>

using namespace dtensor;

namespace {

template <typename T>
void square_in_place(T* p, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i)
    p[i] = p[i] * p[i];
}

void register_square() {
  OpDef def;
  def.name = "my::square";
  def.output_meta = [](const OpSchema& s) {
    return std::vector<TensorMeta>{{s.dtensor(0).shape(), s.dtensor(0).dtype()}};
  };
  // Element-wise: a shard of any dim stays that shard; no Partial signature.
  def.signatures = [](const OpSchema& s) {
    std::vector<ShardingSignature> sigs;
    for (std::int64_t d = 0; d < s.dtensor(0).spec().ndim(); ++d)
      sigs.push_back({{Shard(d)}, {Shard(d)}});
    sigs.push_back({{Replicate()}, {Replicate()}});
    return sigs;
  };
  register_op(def);
  for (DType dt : {DType::F32, DType::F64})
    register_kernel("my::square", DeviceType::CPU, dt, [](const KernelCall& c) {
      Tensor out = c.local(0).contiguous().clone();
      if (out.dtype() == DType::F64)
        square_in_place(out.data<double>(), out.numel());
      else
        square_in_place(out.data<float>(), out.numel());
      return std::vector<Tensor>{out};
    });
}

std::vector<DTensor> normalize_handler(OpCall& call) {
  const DTensor& x = call.schema().dtensor(0);
  // The max of a partial sum says nothing about the sum: make it whole first.
  Placements whole = x.placements();
  for (Placement& p : whole)
    if (p.is_partial()) p = Replicate();
  const DTensor in = x.redistribute(x.mesh(), whole);
  // Each rank's local max, then the max over the whole mesh (replicas agree).
  Tensor m = Tensor::full({1}, max_abs(in.to_local()), DType::F64);
  in.mesh().get_mesh_group()->allreduce(m, ReduceOp::Max);
  const double max = m.item({0});
  return {scale(in, max > 0 ? 1.0 / max : 1.0)};
}

void register_normalize() {
  OpDef def;  // still useful with a handler: validation runs before it on every rank
  def.name = "my::normalize";
  def.validate = [](const OpSchema& s) {
    const DType dt = s.dtensor(0).dtype();
    check_arg(dt != DType::BF16 && dt != DType::F16, "my", "my::normalize: {} not supported",
              dtype_name(dt));
  };
  register_op(def);
  register_op_handler("my::normalize", normalize_handler);
}

}  // namespace

int main() try {
  init_process_group();
  register_square();
  register_normalize();

  const int world = get_world_size();
  DeviceMesh mesh(DeviceType::CPU, world % 2 == 0 ? Shape{world / 2, 2} : Shape{world, 1});
  const Tensor full = Tensor::rand({6, 10}, DType::F64, 7);
  const DTensor x = distribute_tensor(full, mesh, {Shard(0), Shard(1)});

  const DTensor sq = dispatch("my::square", {x}).at(0);
  const DTensor nrm = dispatch("my::normalize", {sq}).at(0);
  const Tensor got = nrm.full_tensor();

  // The same in one process, with plain loops.
  double max = 0;
  for (std::int64_t i = 0; i < full.numel(); ++i)
    max = std::max(max, full.item_flat(i) * full.item_flat(i));
  double err = 0;
  for (std::int64_t i = 0; i < full.numel(); ++i)
    err = std::max(err, std::abs(got.item_flat(i) - full.item_flat(i) * full.item_flat(i) / max));

  if (get_rank() == 0)
    std::printf("my::normalize(my::square(x)) on %s: %s -> %s, max |error| %.2e %s\n",
                mesh.str().c_str(), placements_str(x.placements()).c_str(),
                placements_str(nrm.placements()).c_str(), err, err < 1e-12 ? "OK" : "MISMATCH");
  destroy_process_group();
  return err < 1e-12 ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "custom_op failed: %s\n", e.what());
  return 1;
}
