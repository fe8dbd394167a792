// libFuzzer target: the public Tensor and DTensorSpec API on arbitrary int64
// arguments. The input is decoded into a sequence of calls on a small pool of
// tensors (shapes huge, negative or zero; every dtype; undefined tensors too)
// and on specs over meshes of a few ranks. Every call either succeeds with a
// result that satisfies the invariants checked below, or throws a
// dtensor::Error; where this file can tell on its own (with 128-bit
// arithmetic) that the arguments are valid or invalid, it also checks that the
// call succeeded or raised InvalidArgument accordingly. Any other exception,
// crash or sanitizer report is a finding.
//
// Allocations are capped BEFORE the call (kMaxBytes, computed here with
// overflow-checked arithmetic) so that the fuzzer never runs out of memory;
// shapes whose byte count overflows are always tried, since those must be
// rejected without allocating anything.
//
// A DeviceMesh needs a world group: LocalGroup below claims a size and a rank
// and makes subgroups without talking to anyone (the mesh only asks for
// new_subgroup/split_groups); it refuses every data transfer.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "dtensor/core/config.h"
#include "dtensor/core/device_mesh.h"
#include "dtensor/core/distributed.h"
#include "dtensor/core/errors.h"
#include "dtensor/core/tensor.h"
#include "dtensor/placement/chunk.h"
#include "dtensor/placement/dtensor_spec.h"

using namespace dtensor;

namespace dtensor {
// This target compiles core/device_mesh.cpp but not core/distributed.cpp
// (which brings Gloo): the mesh constructors it does not call name world(),
// so it is defined here, and raises if anything ever reaches it.
std::shared_ptr<ProcessGroup> world() {
  throw InvalidArgument("fuzz", "world(): no process group in the fuzzer");
}
}  // namespace dtensor

namespace {

using i128 = __int128;
constexpr std::int64_t kMaxBytes = std::int64_t{1} << 20;
constexpr std::int64_t kI64Max = std::numeric_limits<std::int64_t>::max();
constexpr std::int64_t kI64Min = std::numeric_limits<std::int64_t>::min();

#define FUZZ_CHECK(cond)                                                         \
  do {                                                                           \
    if (!(cond)) {                                                               \
      std::fprintf(stderr, "invariant failed: %s (line %d)\n", #cond, __LINE__); \
      std::abort();                                                              \
    }                                                                            \
  } while (0)

// Reads the fuzzer's bytes (zeros once exhausted).
struct Reader {
  const std::uint8_t* p;
  std::size_t n;
  bool empty() const { return n == 0; }
  std::uint8_t u8() { return n ? (--n, *p++) : 0; }
  std::uint64_t u64() {
    std::uint64_t v = 0;
    for (int i = 0; i < 8; ++i)
      v |= static_cast<std::uint64_t>(u8()) << (8 * i);
    return v;
  }
  // Mostly small values (where shapes live), often the edges of 64-bit
  // arithmetic, sometimes anything at all.
  std::int64_t i64() {
    static constexpr std::int64_t kEdges[] = {0,
                                              1,
                                              -1,
                                              -2,
                                              2,
                                              3,
                                              kI64Max,
                                              kI64Min,
                                              kI64Max - 1,
                                              std::int64_t{1} << 61,
                                              (std::int64_t{1} << 61) + 1,
                                              std::int64_t{1} << 62,
                                              (std::int64_t{1} << 62) - 1,
                                              std::int64_t{1} << 31,
                                              std::int64_t{1} << 32,
                                              (std::int64_t{1} << 32) + 1,
                                              std::int64_t{3037000500},  // ~sqrt(2^63)
                                              std::int64_t{1} << 40,
                                              kI64Max / 2,
                                              kI64Max / 3};
    const std::uint8_t mode = u8();
    if (mode < 110) return u8() % 6;
    if (mode < 160) return u8() % 65;
    if (mode < 215) return kEdges[u8() % (sizeof(kEdges) / sizeof(kEdges[0]))];
    if (mode < 240) return static_cast<std::int64_t>(u64());
    return -static_cast<std::int64_t>(u8() % 4);
  }
  double f64() {
    const std::uint8_t mode = u8();
    if (mode < 200) return static_cast<double>(static_cast<std::int8_t>(u8())) / 4.0;
    std::uint64_t bits = u64();
    double d;
    std::memcpy(&d, &bits, sizeof d);
    return d;  // any double, NaN and Inf included
  }
  DType dtype() {
    static constexpr DType kTypes[] = {DType::F32, DType::F64, DType::BF16, DType::F16};
    return kTypes[u8() % 4];
  }
  Shape shape(std::size_t max_rank = 4) {
    Shape s(u8() % (max_rank + 1));
    for (auto& e : s)
      e = i64();
    return s;
  }
};

// ---- oracles, in 128-bit arithmetic independent of the library's ----

// Elements of `s` if every extent is >= 0 and the product fits in int64.
std::optional<std::int64_t> numel_of(const Shape& s) {
  i128 n = 1;
  for (auto e : s) {
    if (e < 0) return std::nullopt;
    n *= e;
    if (n > kI64Max) return std::nullopt;
  }
  return static_cast<std::int64_t>(n);
}
// Bytes of a tensor of shape `s` if they fit in int64.
std::optional<std::int64_t> bytes_of(const Shape& s, DType t) {
  const auto n = numel_of(s);
  if (!n) return std::nullopt;
  const i128 b = static_cast<i128>(*n) * static_cast<i128>(dtype_size(t));
  if (b > kI64Max) return std::nullopt;
  return static_cast<std::int64_t>(b);
}
// Whether the dense strides of `s` fit (the product of max(extent, 1)).
bool strides_fit(const Shape& s) {
  i128 n = 1;
  for (auto e : s) {
    n *= std::max<std::int64_t>(e, 1);
    if (n > kI64Max) return false;
  }
  return true;
}

double element_as(double v, DType t) {
  switch (t) {
    case DType::F32:
      return static_cast<float>(v);
    case DType::F64:
      return v;
    case DType::BF16:
      return static_cast<float>(BFloat16(static_cast<float>(v)));
    case DType::F16:
      return static_cast<float>(Float16(static_cast<float>(v)));
    case DType::I64:  // never drawn: the fuzzer's operators are floating
      break;
  }
  return v;
}
bool same_value(double a, double b) {
  return a == b || (std::isnan(a) && std::isnan(b));
}

// A few flat indices to compare element by element (all of a small tensor).
std::vector<std::int64_t> sample_indices(std::int64_t numel) {
  std::vector<std::int64_t> idx;
  if (numel <= 16) {
    for (std::int64_t i = 0; i < numel; ++i)
      idx.push_back(i);
  } else {
    for (std::int64_t k = 0; k < 8; ++k)
      idx.push_back(k * (numel - 1) / 7);
  }
  return idx;
}

// The invariants of any defined tensor the API hands out.
void check_tensor(const Tensor& t) {
  (void)t.data_ptr();  // the address computation itself must not overflow
  (void)t.str();
  if (!t.defined()) return;
  FUZZ_CHECK(t.shape().size() == t.strides().size());
  const auto n = numel_of(t.shape());
  FUZZ_CHECK(n.has_value());
  FUZZ_CHECK(t.numel() == *n);
  const auto bytes = bytes_of(t.shape(), t.dtype());
  FUZZ_CHECK(bytes.has_value());
  FUZZ_CHECK(static_cast<std::int64_t>(t.nbytes()) == *bytes);
  const i128 es = static_cast<i128>(dtype_size(t.dtype()));
  const i128 storage_bytes = static_cast<i128>(t.storage()->nbytes());
  // Even a view with no elements points into (or just past) its storage.
  FUZZ_CHECK(t.storage_offset() >= 0 && t.storage_offset() * es <= storage_bytes);
  if (*n == 0) return;
  // Every element it can address lies inside its storage.
  i128 lo = t.storage_offset(), hi = t.storage_offset();
  for (std::size_t d = 0; d < t.shape().size(); ++d) {
    const i128 reach = static_cast<i128>(t.shape()[d] - 1) * t.strides()[d];
    (reach < 0 ? lo : hi) += reach;
  }
  FUZZ_CHECK(lo >= 0);
  FUZZ_CHECK((hi + 1) * es <= storage_bytes);
}

// Runs `call`; `expect` says whether it must succeed (1), must raise
// InvalidArgument (0), or either (-1). Returns whether it succeeded. Errors
// other than InvalidArgument (e.g. NotSupported) are accepted unless success
// was required; any other exception escapes to libFuzzer as a finding.
template <typename Fn>
bool attempt(int expect, Fn&& call) {
  try {
    call();
  } catch (const InvalidArgument& e) {
    if (expect == 1) {
      std::fprintf(stderr, "valid call rejected: %s\n", e.what());
      std::abort();
    }
    return false;
  } catch (const Error& e) {
    if (expect != -1) {
      std::fprintf(stderr, "unexpected %s\n", e.what());
      std::abort();
    }
    return false;
  }
  if (expect == 0) {
    std::fprintf(stderr, "invalid call accepted\n");
    std::abort();
  }
  return true;
}

// ---- tensors ----

struct Pool {
  std::vector<Tensor> t;
  Tensor& pick(Reader& r) { return t[r.u8() % t.size()]; }
  void put(Reader& r, Tensor x) {
    check_tensor(x);
    if (t.size() < 8)
      t.push_back(std::move(x));
    else
      t[r.u8() % t.size()] = std::move(x);
  }
};

// Whether a shape may be allocated: invalid (must throw, allocating nothing)
// or within the cap.
int alloc_expectation(const Shape& s, DType t, bool* skip) {
  const auto b = bytes_of(s, t);
  *skip = b && *b > kMaxBytes;
  if (!b) return 0;
  return strides_fit(s) ? 1 : -1;  // an empty shape with huge extents may be refused
}

void op_create(Reader& r, Pool& pool) {
  const Shape s = r.shape();
  const DType t = r.dtype();
  const std::uint8_t kind = r.u8() % 4;
  const double value = r.f64();
  const std::uint64_t seed = r.u64();
  bool skip = false;
  const int expect = alloc_expectation(s, t, &skip);
  if (skip) return;
  Tensor x;
  if (!attempt(expect, [&] {
        switch (kind) {
          case 0:
            x = Tensor::empty(s, t);
            break;
          case 1:
            x = Tensor::zeros(s, t);
            break;
          case 2:
            x = Tensor::full(s, value, t);
            break;
          default:
            x = Tensor::rand(s, t, seed);
        }
      }))
    return;
  FUZZ_CHECK(x.defined() && x.shape() == s && x.dtype() == t && x.storage_offset() == 0);
  FUZZ_CHECK(x.is_contiguous());
  for (auto i : sample_indices(x.numel())) {
    const double v = x.item_flat(i);
    if (kind == 1) FUZZ_CHECK(v == 0.0);
    if (kind == 2) FUZZ_CHECK(same_value(v, element_as(value, t)));
    if (kind == 3) FUZZ_CHECK(v >= -1.0 && v <= 1.0);
  }
  pool.put(r, std::move(x));
}

void op_narrow(Reader& r, Pool& pool) {
  const Tensor& x = pool.pick(r);
  const std::int64_t d = r.i64(), start = r.i64(), length = r.i64();
  const std::int64_t nd = x.dim();
  const i128 dd = d < 0 ? static_cast<i128>(d) + nd : d;
  bool valid = x.defined() && dd >= 0 && dd < nd;
  if (valid) {
    const std::int64_t extent = x.shape()[static_cast<std::size_t>(dd)];
    valid = start >= 0 && length >= 0 && static_cast<i128>(start) + length <= extent;
  }
  Tensor y;
  if (!attempt(valid ? 1 : 0, [&] { y = x.narrow(d, start, length); })) return;
  const auto k = static_cast<std::size_t>(dd);
  FUZZ_CHECK(y.shares_storage_with(x) && y.strides() == x.strides() && y.dtype() == x.dtype());
  FUZZ_CHECK(y.shape()[k] == length);
  if (y.numel() > 0) {
    FUZZ_CHECK(y.storage_offset() == x.storage_offset() + start * x.strides()[k]);
    // The view's first element is the source's element at [.., start, ..].
    std::int64_t flat = 0;
    Shape idx(x.shape().size(), 0);
    idx[k] = start;
    for (std::size_t i = 0; i < idx.size(); ++i)
      flat = flat * x.shape()[i] + idx[i];
    FUZZ_CHECK(same_value(y.item_flat(0), x.item_flat(flat)));
  } else {
    FUZZ_CHECK(y.storage_offset() == x.storage_offset());  // addresses nothing: stays put
  }
  pool.put(r, std::move(y));
}

void op_view(Reader& r, Pool& pool) {
  const Tensor& x = pool.pick(r);
  const Shape s = r.shape();
  const auto n = numel_of(s);
  int expect = 0;
  if (x.defined() && x.is_contiguous() && n && *n == x.numel()) expect = strides_fit(s) ? 1 : -1;
  Tensor y;
  if (!attempt(expect, [&] { y = x.view(s); })) return;
  FUZZ_CHECK(y.shape() == s && y.shares_storage_with(x) && y.is_contiguous());
  for (auto i : sample_indices(y.numel()))
    FUZZ_CHECK(same_value(y.item_flat(i), x.item_flat(i)));
  pool.put(r, std::move(y));
}

// contiguous / clone / to(dtype): a dense copy with the same values.
void op_copy_out(Reader& r, Pool& pool) {
  const Tensor& x = pool.pick(r);
  const std::uint8_t kind = r.u8() % 3;
  const DType t = kind == 2 ? r.dtype() : x.dtype();
  if (x.defined() && static_cast<std::int64_t>(x.numel() * dtype_size(t)) > kMaxBytes) return;
  Tensor y;
  if (!attempt(x.defined() ? 1 : -1, [&] {
        y = kind == 0 ? x.contiguous() : kind == 1 ? x.clone() : x.to(t);
      }))
    return;
  if (!x.defined()) return;
  FUZZ_CHECK(y.shape() == x.shape() && y.dtype() == t && y.is_contiguous());
  if (kind != 0) FUZZ_CHECK(!y.shares_storage_with(x));
  for (auto i : sample_indices(x.numel()))
    FUZZ_CHECK(same_value(y.item_flat(i), element_as(x.item_flat(i), t)));
  pool.put(r, std::move(y));
}

void op_copy_into(Reader& r, Pool& pool) {
  Tensor& dst = pool.pick(r);
  const Tensor src = pool.pick(r);
  const bool valid = dst.defined() && src.defined() && dst.shape() == src.shape();
  // A source that overlaps the destination is read while written: only the
  // absence of memory errors is checked then, not the values.
  const bool check_values = valid && !dst.shares_storage_with(src);
  const Tensor before = check_values ? src.clone() : Tensor();
  if (!attempt(valid ? 1 : 0, [&] { dst.copy_(src); })) return;
  check_tensor(dst);
  if (check_values)
    for (auto i : sample_indices(dst.numel()))
      FUZZ_CHECK(same_value(dst.item_flat(i), element_as(before.item_flat(i), dst.dtype())));
}

void op_fill_add(Reader& r, Pool& pool) {
  Tensor& x = pool.pick(r);
  if (r.u8() % 2) {
    const double v = r.f64();
    if (!attempt(x.defined() ? 1 : 0, [&] { x.fill_(v); })) return;
    for (auto i : sample_indices(x.numel()))
      FUZZ_CHECK(same_value(x.item_flat(i), element_as(v, x.dtype())));
    return;
  }
  const Tensor src = pool.pick(r);
  const bool valid =
      x.defined() && src.defined() && x.shape() == src.shape() && x.dtype() == src.dtype();
  attempt(valid ? 1 : 0, [&] { x.add_(src); });
}

void op_rand_slice(Reader& r, Pool& pool) {
  const std::size_t rank = r.u8() % 4;
  Shape global(rank), offset(rank), shape(rank);
  for (std::size_t d = 0; d < rank; ++d) {
    global[d] = r.i64();
    offset[d] = r.i64();
    shape[d] = r.i64();
  }
  if (r.u8() % 8 == 0) shape.push_back(1);  // rank mismatch
  const DType t = r.dtype();
  const std::uint64_t seed = r.u64();
  bool fits = global.size() == shape.size();
  for (std::size_t d = 0; fits && d < rank; ++d)
    fits = offset[d] >= 0 && shape[d] >= 0 && shape[d] <= global[d] &&
           static_cast<i128>(offset[d]) + shape[d] <= global[d];
  bool skip = false;
  int expect = alloc_expectation(shape, t, &skip);
  if (skip) return;
  if (!fits) expect = 0;
  if (expect == 1 && !strides_fit(global)) expect = -1;
  Tensor y;
  if (!attempt(expect, [&] { y = Tensor::rand_slice(global, offset, shape, t, seed); })) return;
  FUZZ_CHECK(y.shape() == shape && y.dtype() == t);
  // Against the whole, where the whole is small.
  const auto gn = numel_of(global);
  if (gn && *gn <= 4096) {
    const Tensor whole = Tensor::rand(global, t, seed);
    for (auto i : sample_indices(y.numel())) {
      std::int64_t rest = i, gflat = 0;
      Shape idx(rank);
      for (std::size_t d = rank; d-- > 0;) {
        idx[d] = rest % shape[d];
        rest /= shape[d];
      }
      for (std::size_t d = 0; d < rank; ++d)
        gflat = gflat * global[d] + offset[d] + idx[d];
      FUZZ_CHECK(same_value(y.item_flat(i), whole.item_flat(gflat)));
    }
  }
  pool.put(r, std::move(y));
}

void op_inspect(Reader& r, Pool& pool) {
  const Tensor& x = pool.pick(r);
  const std::int64_t a = r.i64(), b = r.i64(), c = r.i64();
  const std::int64_t nd = x.dim();
  const auto in_dim = [&](std::int64_t d) {
    const i128 dd = d < 0 ? static_cast<i128>(d) + nd : d;
    return dd >= 0 && dd < nd;
  };
  attempt(in_dim(a) ? 1 : 0, [&] { (void)x.size(a); });
  attempt(in_dim(a) ? 1 : 0, [&] { (void)x.stride(a); });
  attempt(x.defined() && a >= 0 && a < x.numel() ? 1 : 0, [&] { (void)x.item_flat(a); });
  // item({...}) with 0..3 indices.
  const std::size_t count = r.u8() % 4;
  const std::int64_t idx[3] = {a, b, c};
  bool valid = x.defined() && static_cast<std::int64_t>(count) == nd;
  std::int64_t flat = 0;
  for (std::size_t k = 0; valid && k < count; ++k) {
    valid = idx[k] >= 0 && idx[k] < x.shape()[k];
    flat = valid ? flat * x.shape()[k] + idx[k] : 0;
  }
  double v = 0;
  const bool ok = attempt(valid ? 1 : 0, [&] {
    switch (count) {
      case 0:
        v = x.item({});
        break;
      case 1:
        v = x.item({a});
        break;
      case 2:
        v = x.item({a, b});
        break;
      default:
        v = x.item({a, b, c});
    }
  });
  if (ok && valid) FUZZ_CHECK(same_value(v, x.item_flat(flat)));
  // data<T>() with the right and a wrong type; to(device) without a device backend.
  attempt(-1, [&] { (void)x.data<float>(); });
  attempt(-1, [&] { (void)x.data<double>(); });
  attempt(-1, [&] { (void)x.to(Device::cuda(static_cast<int>(b & 7))); });
  const Tensor& y = pool.pick(r);
  attempt(x.defined() && y.defined() && x.shape() == y.shape() ? 1 : 0,
          [&] { (void)max_abs_diff(x, y); });
  attempt(x.defined() ? 1 : 0, [&] { (void)max_abs(x); });
}

// ---- DTensorSpec over meshes of a few ranks ----

// A group that knows its size and rank and never moves data: enough for a
// DeviceMesh, which only creates subgroups.
class LocalGroup : public ProcessGroup {
 public:
  LocalGroup(int rank, std::vector<int> global) : rank_(rank), global_(std::move(global)) {}
  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(global_.size()); }
  std::string backend_name() const override { return "local"; }
  const std::vector<int>& global_ranks() const override { return global_; }
  std::chrono::milliseconds timeout() const override { return std::chrono::milliseconds(1); }
  std::shared_ptr<Work> isend(const Tensor&, int, int) override { refuse(); }
  std::shared_ptr<Work> irecv(const Tensor&, int, int) override { refuse(); }
  void allreduce(Tensor&, ReduceOp) override { refuse(); }
  void broadcast(Tensor&, int) override { refuse(); }
  void allgather(const Tensor&, Tensor&, const std::vector<std::int64_t>&) override { refuse(); }
  void reduce_scatter(const Tensor&, Tensor&, const std::vector<std::int64_t>&, ReduceOp) override {
    refuse();
  }
  void all_to_all(const Tensor&, const std::vector<std::int64_t>&, Tensor&,
                  const std::vector<std::int64_t>&) override {
    refuse();
  }
  void barrier() override { refuse(); }
  std::shared_ptr<ProcessGroup> new_subgroup(const std::vector<int>& ranks) override {
    FUZZ_CHECK(std::is_sorted(ranks.begin(), ranks.end()));
    std::vector<int> global;
    int me = -1;
    for (int r : ranks) {
      FUZZ_CHECK(r >= 0 && r < size());
      if (r == rank_) me = static_cast<int>(global.size());
      global.push_back(global_[static_cast<std::size_t>(r)]);
    }
    FUZZ_CHECK(me >= 0);  // only members create a group
    return std::make_shared<LocalGroup>(me, std::move(global));
  }

 private:
  [[noreturn]] static void refuse() { throw NotSupported("fuzz", "LocalGroup moves no data"); }
  int rank_;
  std::vector<int> global_;
};

void check_spec(const DTensorSpec& spec) {
  const DeviceMesh& mesh = spec.mesh();
  const Shape& g = spec.shape();
  const std::size_t nd = g.size();
  // Walk every coordinate of the mesh.
  std::vector<std::int64_t> c(static_cast<std::size_t>(mesh.ndim()), 0);
  i128 total = 0;
  std::vector<std::vector<std::pair<std::int64_t, std::int64_t>>> pieces(nd);
  while (true) {
    const Shape local = spec.local_shape_at(c);
    const Shape off = spec.global_offset_at(c);
    FUZZ_CHECK(local.size() == nd && off.size() == nd);
    i128 n = 1;
    for (std::size_t d = 0; d < nd; ++d) {
      FUZZ_CHECK(off[d] >= 0 && local[d] >= 0 && static_cast<i128>(off[d]) + local[d] <= g[d]);
      if (spec.mesh_dims_sharding(static_cast<std::int64_t>(d)).empty())
        FUZZ_CHECK(off[d] == 0 && local[d] == g[d]);
      pieces[d].push_back({off[d], local[d]});
      n *= local[d];
    }
    total += n;
    std::size_t k = c.size();
    while (k-- > 0 && ++c[k] == mesh.size(static_cast<std::int64_t>(k)))
      c[k] = 0;
    if (k == static_cast<std::size_t>(-1)) break;
  }
  // The shards tile the global box: every element is held once per
  // non-sharding (Replicate / Partial) mesh position.
  i128 copies = 1, whole = 1;
  for (std::size_t i = 0; i < spec.placements().size(); ++i)
    if (!spec.placements()[i].is_shard()) copies *= mesh.size(static_cast<std::int64_t>(i));
  for (auto e : g)
    whole *= e;
  FUZZ_CHECK(total == whole * copies);
  // Along each dim the distinct pieces tile [0, g[d]).
  for (std::size_t d = 0; d < nd; ++d) {
    auto& p = pieces[d];
    std::sort(p.begin(), p.end());
    p.erase(std::unique(p.begin(), p.end()), p.end());
    std::int64_t at = 0;
    for (auto [o, l] : p) {
      if (l == 0) continue;
      FUZZ_CHECK(o == at);
      at = o + l;
    }
    FUZZ_CHECK(at == g[d]);
  }
  // This rank's own shard.
  const auto& me = mesh.get_coordinate();
  FUZZ_CHECK(spec.local_shape() == (me ? spec.local_shape_at(*me) : Shape(nd, 0)));
  FUZZ_CHECK(spec.global_offset() == (me ? spec.global_offset_at(*me) : Shape(nd, 0)));
  FUZZ_CHECK(spec == spec && spec.hash() == spec.hash());
  (void)spec.str();
}

void op_spec(Reader& r) {
  // A mesh of 1-3 dims, 1-4 ranks each (sometimes an invalid extent), over a
  // world that may hold extra ranks, placed at an offset.
  Shape mesh_shape(1 + r.u8() % 3);
  for (auto& e : mesh_shape)
    e = r.u8() % 16 == 0 ? r.i64() : 1 + r.u8() % 4;
  const int extra = r.u8() % 3, shift = r.u8() % (extra + 1);
  const auto mesh_n = numel_of(mesh_shape);
  // A mesh of more than 64 ranks is not built: its rank list is left empty,
  // which the mesh must reject whatever the shape.
  const bool mesh_ok =
      mesh_n && *mesh_n <= 64 &&
      std::all_of(mesh_shape.begin(), mesh_shape.end(), [](std::int64_t e) { return e >= 1; });
  std::vector<int> ranks;
  for (std::int64_t i = 0; mesh_ok && i < *mesh_n; ++i)
    ranks.push_back(static_cast<int>(i) + shift);
  const int world_size = static_cast<int>(ranks.size()) + extra;
  std::vector<int> world_ranks(static_cast<std::size_t>(std::max(world_size, 1)));
  for (std::size_t i = 0; i < world_ranks.size(); ++i)
    world_ranks[i] = static_cast<int>(i);
  const int me = r.u8() % static_cast<int>(world_ranks.size());
  auto world_group = std::make_shared<LocalGroup>(me, world_ranks);
  std::optional<DeviceMesh> mesh;
  if (!attempt(mesh_ok ? 1 : 0,
               [&] { mesh.emplace(DeviceType::CPU, mesh_shape, ranks, world_group); }))
    return;
  FUZZ_CHECK(mesh->contains_this_rank() == (me >= shift && me < shift + *mesh_n));

  // Placements: one per mesh dim (sometimes one too many or too few).
  Placements placements;
  std::size_t count = mesh_shape.size();
  if (r.u8() % 8 == 0) count = r.u8() % 5;
  for (std::size_t i = 0; i < count; ++i) {
    const std::uint8_t k = r.u8() % 4;
    if (k == 0)
      placements.push_back(Replicate());
    else if (k == 1)
      placements.push_back(Partial(static_cast<ReduceOp>(r.u8() % 4)));
    else
      placements.push_back(Shard(r.u8() % 4 == 0 ? r.i64() : static_cast<std::int8_t>(r.u8()) % 5));
  }
  const Shape g = r.shape();
  const DType t = r.dtype();
  const auto nd = static_cast<std::int64_t>(g.size());
  bool valid = placements.size() == mesh_shape.size() && bytes_of(g, t).has_value();
  for (const auto& p : placements)
    valid = valid && (!p.is_shard() || (p.dim() >= -nd && p.dim() < nd));
  std::optional<DTensorSpec> spec;
  if (!attempt(valid ? 1 : 0, [&] { spec.emplace(*mesh, placements, g, t); })) return;
  check_spec(*spec);

  // Arbitrary coordinates: a shard or InvalidArgument, never a wild read.
  std::vector<std::int64_t> c(r.u8() % 5);
  bool in_mesh = c.size() == mesh_shape.size();
  for (std::size_t i = 0; i < c.size(); ++i) {
    c[i] = r.u8() % 2 ? r.u8() % 5 : r.i64();
    in_mesh = in_mesh && i < mesh_shape.size() && c[i] >= 0 && c[i] < mesh_shape[i];
  }
  attempt(in_mesh ? 1 : 0, [&] { (void)spec->local_shape_at(c); });
  attempt(in_mesh ? 1 : 0, [&] { (void)spec->global_offset_at(c); });
  attempt(1, [&] { (void)spec->mesh_dims_sharding(r.i64()); });
}

void op_chunk(Reader& r) {
  const std::int64_t L = r.i64(), P = r.i64(), k = r.i64();
  const bool valid = L >= 0 && P >= 1 && k >= 0 && k < P;
  Extent e;
  if (!attempt(valid ? 1 : 0, [&] { e = chunk_extent(L, P, k); })) return;
  // torch.chunk's rule in 128 bits: c = ceil(L / P), [min(kc, L), min((k+1)c, L)).
  const i128 c = (static_cast<i128>(L) + P - 1) / P;
  const i128 b = std::min<i128>(k * c, L), end = std::min<i128>((k + 1) * c, L);
  FUZZ_CHECK(e.offset == b && e.length == end - b);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // No buffer cache: freed tensors go back to the allocator, so ASan sees a
  // read of a dead view's storage.
  Config c = config();
  c.cpu_cache_mb = 0;
  set_config(c);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Reader r{data, size};
  Pool pool;
  pool.t.push_back(Tensor());  // the undefined tensor is part of the API too
  pool.t.push_back(Tensor::zeros({2, 3}, DType::F32));
  for (int step = 0; step < 64 && !r.empty(); ++step) {
    switch (r.u8() % 10) {
      case 0:
      case 1:
        op_create(r, pool);
        break;
      case 2:
        op_narrow(r, pool);
        break;
      case 3:
        op_view(r, pool);
        break;
      case 4:
        op_copy_out(r, pool);
        break;
      case 5:
        op_copy_into(r, pool);
        break;
      case 6:
        op_fill_add(r, pool);
        break;
      case 7:
        op_rand_slice(r, pool);
        break;
      case 8:
        op_inspect(r, pool);
        break;
      default:
        if (r.u8() % 4 == 0)
          op_chunk(r);
        else
          op_spec(r);
    }
  }
  for (const auto& t : pool.t)
    check_tensor(t);
  return 0;
}
