// An example plugin: `example::cumsum(x, dim)`, the running sum along `dim`.
//
// Its distributed version needs communication when `dim` is sharded: each
// rank scans its own shard, then adds the totals of the ranks before it along
// that mesh dim (one small all-gather of the last slices). Otherwise the
// default path runs: the strategies below say any other shard or Replicate
// works locally, and the propagator redistributes whatever else comes in.
//
// Build it as a shared library linking dtensor::dtensor, load it on every
// rank with dtensor::load_plugin("libdtensor_example_cumsum.so").
#include <dtensor/dtensor.h>

namespace {

using namespace dtensor;

// Running sum along `dim` of a contiguous tensor, in place.
template <typename T>
void scan(Tensor& t, std::int64_t dim) {
  T* p = t.data<T>();
  std::int64_t outer = 1, inner = 1;
  for (std::int64_t d = 0; d < dim; ++d)
    outer *= t.size(d);
  for (std::int64_t d = dim + 1; d < t.dim(); ++d)
    inner *= t.size(d);
  const std::int64_t n = t.size(dim);
  for (std::int64_t o = 0; o < outer; ++o)
    for (std::int64_t k = 1; k < n; ++k)
      for (std::int64_t i = 0; i < inner; ++i)
        p[(o * n + k) * inner + i] += p[(o * n + k - 1) * inner + i];
}

Tensor local_cumsum(const Tensor& x, std::int64_t dim) {
  Tensor out = x.clone();
  if (x.dtype() == DType::F64)
    scan<double>(out, dim);
  else
    scan<float>(out, dim);
  return out;
}

std::int64_t scan_dim(const OpSchema& s) {
  return normalize_dim(s.int_value(1), s.dtensor(0).spec().ndim(), "example::cumsum dim");
}

std::vector<DTensor> cumsum_handler(OpCall& call) {
  const OpSchema& s = call.schema();
  const DTensor& x = s.dtensor(0);
  const std::int64_t dim = scan_dim(s);
  const auto mesh_dims = x.spec().mesh_dims_sharding(dim);
  if (mesh_dims.size() != 1 || x.spec().has_partial()) return call.run_default();

  // dim is sharded on one mesh dim m: scan locally, then add the totals of
  // the ranks before this one along m.
  const std::int64_t m = mesh_dims[0];
  auto group = x.mesh().get_group(m);
  const Tensor& local = x.to_local();
  Tensor out = local_cumsum(local.contiguous(), dim);
  const std::int64_t len = local.size(dim);
  Shape slice_shape = local.shape();
  slice_shape[dim] = 1;
  Tensor last = Tensor::zeros(slice_shape, local.dtype());
  if (len > 0) last.copy_(out.narrow(dim, len - 1, 1));
  const std::int64_t n = shape_numel(slice_shape);
  Tensor all = Tensor::empty({group->size() * n}, local.dtype());
  group->allgather(last.view({n}), all, std::vector<std::int64_t>(group->size(), n));
  Tensor offset = Tensor::zeros(slice_shape, local.dtype());
  for (int q = 0; q < group->rank(); ++q)
    offset.add_(all.narrow(0, q * n, n).view(slice_shape));
  for (std::int64_t k = 0; k < len; ++k)
    out.narrow(dim, k, 1).add_(offset);
  return {DTensor(out, x.spec())};
}

void register_cumsum() {
  OpDef def;
  def.name = "example::cumsum";
  def.validate = [](const OpSchema& s) {
    // Kernels exist for f32 and f64 only (a running sum wants the precision).
    const DType dt = s.dtensor(0).dtype();
    check_arg(dt == DType::F32 || dt == DType::F64, "example",
              "example::cumsum: {} is not supported (f32 or f64)", dtype_name(dt));
    scan_dim(s);
  };
  def.output_meta = [](const OpSchema& s) {
    return std::vector<TensorMeta>{{s.dtensor(0).shape(), s.dtensor(0).dtype()}};
  };
  // Locally computable: shards of any other dim, or a replica.
  def.signatures = [](const OpSchema& s) {
    std::vector<ShardingSignature> sigs;
    const std::int64_t dim = scan_dim(s);
    for (std::int64_t d = 0; d < s.dtensor(0).spec().ndim(); ++d)
      if (d != dim) sigs.push_back({{Shard(d)}, {Shard(d)}});
    sigs.push_back({{Replicate()}, {Replicate()}});
    return sigs;
  };
  register_op(def);
  for (DType dt : {DType::F32, DType::F64})
    register_kernel("example::cumsum", DeviceType::CPU, dt, [](const KernelCall& c) {
      return std::vector<Tensor>{local_cumsum(c.local(0).contiguous(), scan_dim(c.schema))};
    });
  register_op_handler("example::cumsum", cumsum_handler);
}

}  // namespace

DTENSOR_PLUGIN(register_cumsum)
