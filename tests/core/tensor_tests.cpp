// Single-process tests of the core Tensor: views share storage, copies do not,
// strided copies and conversions are exact, seeded random data is the same
// wherever it is generated.
#include <catch2/catch.hpp>
#include <cstdint>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "core/detail/strided_loop.h"
#include "dtensor/core/tensor.h"

using dtensor::DType;
using dtensor::Shape;
using dtensor::Tensor;

namespace {
// Fills t with its own row-major flat index, computed independently of Tensor's loops.
void iota(Tensor& t) {
  double* p = t.data<double>();
  for (std::int64_t i = 0; i < t.numel(); ++i)
    p[i] = static_cast<double>(i);
}
}  // namespace

TEST_CASE("tensor storage is 64-byte aligned and shapes/strides are row-major", "[tensor]") {
  for (DType dt : {DType::F32, DType::F64, DType::BF16, DType::F16}) {
    Tensor t = Tensor::empty({2, 3, 5}, dt);
    REQUIRE(reinterpret_cast<std::uintptr_t>(t.data_ptr()) % 64 == 0);
    REQUIRE(t.strides() == Shape{15, 5, 1});
    REQUIRE(t.numel() == 30);
    REQUIRE(t.nbytes() == 30 * dtensor::dtype_size(dt));
    REQUIRE(t.is_contiguous());
  }
  Tensor z = Tensor::empty({4, 0, 3}, DType::F32);
  REQUIRE(z.numel() == 0);
  REQUIRE(z.defined());
}

TEST_CASE("narrow is a view sharing storage, contiguous copies only when needed", "[tensor]") {
  Tensor t = Tensor::empty({3, 4, 5}, DType::F64);
  iota(t);
  Tensor v = t.narrow(2, 1, 3);
  REQUIRE(v.shares_storage_with(t));
  REQUIRE_FALSE(v.is_contiguous());
  REQUIRE(v.shape() == Shape{3, 4, 3});
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j)
      for (int k = 0; k < 3; ++k)
        REQUIRE(v.item({i, j, k}) == i * 20 + j * 5 + (k + 1));
  Tensor c = v.contiguous();
  REQUIRE(c.is_contiguous());
  REQUIRE_FALSE(c.shares_storage_with(t));
  REQUIRE(dtensor::max_abs_diff(c, v) == 0.0);
  Tensor row = t.narrow(0, 1, 1);
  REQUIRE(row.is_contiguous());
  REQUIRE(row.contiguous().shares_storage_with(t));
  // Writes through a view land in the base tensor.
  v.fill_(-1);
  REQUIRE(t.item({2, 3, 1}) == -1);
  REQUIRE(t.item({2, 3, 0}) == 2 * 20 + 3 * 5);
  REQUIRE(t.item({2, 3, 4}) == 2 * 20 + 3 * 5 + 4);
  // Negative dims count from the end.
  REQUIRE(t.narrow(-1, 0, 2).shape() == Shape{3, 4, 2});
}

TEST_CASE("copy_ between strided views and across dtypes", "[tensor]") {
  Tensor src = Tensor::empty({4, 6}, DType::F64);
  iota(src);
  Tensor dst = Tensor::zeros({4, 10}, DType::F32);
  Tensor window = dst.narrow(1, 2, 6);
  window.copy_(src);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 10; ++j) {
      const double expect = (j >= 2 && j < 8) ? i * 6 + (j - 2) : 0.0;
      REQUIRE(dst.item({i, j}) == expect);
    }
  // Into a strided destination from a strided source.
  Tensor a = Tensor::zeros({4, 3}, DType::F64);
  a.copy_(src.narrow(1, 3, 3));
  REQUIRE(a.item({3, 2}) == 3 * 6 + 5);
  REQUIRE_THROWS_AS(a.copy_(src), dtensor::InvalidArgument);
}

TEST_CASE("bf16 conversion rounds to nearest even and round-trips exactly representable values",
          "[tensor][bf16]") {
  Tensor t = Tensor::empty({5}, DType::F32);
  float* p = t.data<float>();
  p[0] = 1.0f;
  p[1] = -2.5f;
  p[2] = 1.0f + 1.0f / 256.0f;  // exactly halfway between two bf16 values: to even (1.0)
  p[3] = 1.0f + 3.0f / 256.0f;  // halfway: to even (1 + 4/256)
  p[4] = 3.0e38f;
  Tensor b = t.to(DType::BF16);
  REQUIRE(b.item({0}) == 1.0);
  REQUIRE(b.item({1}) == -2.5);
  REQUIRE(b.item({2}) == 1.0);
  REQUIRE(b.item({3}) == 1.0 + 4.0 / 256.0);
  REQUIRE(std::abs(b.item({4}) - 3.0e38) / 3.0e38 < 1.0 / 128);
}

TEST_CASE("seeded random fill is reproducible and rand_slice matches the whole", "[tensor][rand]") {
  Tensor a = Tensor::rand({3, 7, 5}, DType::F64, 42);
  Tensor b = Tensor::rand({3, 7, 5}, DType::F64, 42);
  Tensor c = Tensor::rand({3, 7, 5}, DType::F64, 43);
  REQUIRE(dtensor::max_abs_diff(a, b) == 0.0);
  REQUIRE(dtensor::max_abs_diff(a, c) > 0.1);
  REQUIRE(dtensor::max_abs(a) <= 1.0);
  Tensor s = Tensor::rand_slice({3, 7, 5}, {1, 2, 1}, {2, 4, 3}, DType::F64, 42);
  REQUIRE(dtensor::max_abs_diff(s, a.narrow(0, 1, 2).narrow(1, 2, 4).narrow(2, 1, 3)) == 0.0);
  // f32 data is the f64 data rounded: the f64 oracle sees the same inputs.
  Tensor f = Tensor::rand({3, 7, 5}, DType::F32, 42);
  REQUIRE(dtensor::max_abs_diff(f, a) < 1e-7);
  // The values spread over [-1, 1): mean near 0.
  double sum = 0;
  Tensor big = Tensor::rand({10000}, DType::F64, 7);
  for (int i = 0; i < 10000; ++i)
    sum += big.item({i});
  REQUIRE(std::abs(sum / 10000) < 0.05);
}

TEST_CASE("add_ and fill_ on strided views", "[tensor]") {
  Tensor t = Tensor::zeros({2, 5}, DType::F64);
  Tensor ones = Tensor::full({2, 2}, 1.5, DType::F64);
  t.narrow(1, 3, 2).add_(ones);
  t.narrow(1, 3, 2).add_(ones);
  REQUIRE(t.item({1, 4}) == 3.0);
  REQUIRE(t.item({1, 2}) == 0.0);
  REQUIRE_THROWS_AS(t.add_(ones), dtensor::InvalidArgument);
}

TEST_CASE("tensor errors are typed and name the operation", "[tensor][errors]") {
  Tensor t = Tensor::zeros({2, 3}, DType::F32);
  try {
    t.narrow(1, 2, 5);
    FAIL("expected an exception");
  } catch (const dtensor::InvalidArgument& e) {
    REQUIRE(std::string(e.what()).rfind("[dtensor.core] narrow", 0) == 0);
  }
  REQUIRE_THROWS_AS(t.data<double>(), dtensor::InvalidArgument);
  REQUIRE_THROWS_AS(t.view({4}), dtensor::InvalidArgument);
  REQUIRE_THROWS_AS(Tensor::empty({2, -1}, DType::F32), dtensor::InvalidArgument);
  REQUIRE_THROWS_AS(t.item({2, 0}), dtensor::InvalidArgument);
  REQUIRE_THROWS_AS(dtensor::parse_dtype("f8"), dtensor::InvalidArgument);
  REQUIRE_THROWS_AS(Tensor::empty({2}, DType::F32, dtensor::Device::cuda(0)),
                    dtensor::NotSupported);
}

TEST_CASE("parse_int_list accepts lists and names the parameter on bad input", "[core][parse]") {
  REQUIRE(dtensor::parse_int_list("2,3,4", "--input") == Shape{2, 3, 4});
  REQUIRE(dtensor::parse_int_list("2x2", "--mesh", 'x') == Shape{2, 2});
  for (const char* bad : {"", "2,,3", "a", "2,3,", "1.5"}) {
    INFO(bad);
    try {
      dtensor::parse_int_list(bad, "--input");
      FAIL("expected an exception");
    } catch (const dtensor::InvalidArgument& e) {
      REQUIRE(std::string(e.what()).find("--input") != std::string::npos);
    }
  }
}

TEST_CASE("shapes whose element count overflows 64 bits are rejected, not undefined",
          "[core][shape][errors]") {
  // Found by the parser fuzzer: --mesh 1008820088210292x10292x2.
  REQUIRE_THROWS_AS(dtensor::shape_numel({1008820088210292, 10292, 2}), dtensor::InvalidArgument);
  REQUIRE_THROWS_AS(dtensor::contiguous_strides({1LL << 40, 1LL << 30}), dtensor::InvalidArgument);
  REQUIRE(dtensor::shape_numel({1LL << 31, 1LL << 31}) == (1LL << 62));
}

TEST_CASE("tensor sizes: every shape and byte computation is overflow-checked", "[tensor][sizes]") {
  using Catch::Contains;
  using dtensor::DType;
  using dtensor::InvalidArgument;
  using dtensor::Tensor;
  constexpr std::int64_t kMax = INT64_MAX;
  // Sizes whose bytes (or elements) do not fit in 64 bits: refused, never a
  // small buffer written past its end.
  CHECK_THROWS_AS(Tensor::full({(std::int64_t{1} << 61) + 1}, 1.0, DType::F64), InvalidArgument);
  CHECK_THROWS_AS(Tensor::full({std::int64_t{1} << 62}, 1.0, DType::F32), InvalidArgument);
  CHECK_THROWS_AS(Tensor::zeros({(std::int64_t{1} << 62) - 1}, DType::F32), InvalidArgument);
  CHECK_THROWS_AS(Tensor::empty({std::int64_t{1} << 40, std::int64_t{1} << 40}, DType::F32),
                  InvalidArgument);
  // narrow: start + length would overflow.
  const Tensor t = Tensor::zeros({4}, DType::F32);
  CHECK_THROWS_WITH(t.narrow(0, kMax, 1), Contains("narrow"));
  CHECK_THROWS_AS(t.narrow(0, 1, kMax), InvalidArgument);
  CHECK_THROWS_AS(t.narrow(0, -1, 2), InvalidArgument);
  // view: negative extents whose product happens to match.
  CHECK_THROWS_WITH(t.view({-2, -2}), Contains("negative"));
  CHECK_THROWS_AS(Tensor::rand_slice({4}, {kMax}, {1}, DType::F32, 1), InvalidArgument);
}

TEST_CASE("an undefined tensor raises InvalidArgument rather than reading no storage",
          "[tensor][errors]") {
  // Found by the tensor API fuzzer: each of these dereferenced a null storage.
  const Tensor none;
  Tensor target;
  const Tensor x = Tensor::zeros({1}, DType::F32);
  CHECK_THROWS_AS(none.item_flat(0), dtensor::InvalidArgument);
  CHECK_THROWS_AS(none.item({}), dtensor::InvalidArgument);
  CHECK_THROWS_AS(none.view({1}), dtensor::InvalidArgument);
  CHECK_THROWS_AS(target.add_(none), dtensor::InvalidArgument);
  CHECK_THROWS_AS(dtensor::max_abs(none), dtensor::InvalidArgument);
  CHECK_THROWS_AS(dtensor::max_abs_diff(none, x.view({})), dtensor::InvalidArgument);
}

TEST_CASE("empty views of huge shapes stay inside their storage", "[tensor][sizes]") {
  // Found by the tensor API fuzzer. Narrowing an empty tensor to the far end
  // of a huge dim moved its offset to 2^63 - 1 elements (data_ptr() then
  // overflowed), and a second narrow past 2^63; a view with no elements now
  // keeps its source's offset.
  constexpr std::int64_t kMax = INT64_MAX, k62 = (std::int64_t{1} << 62) - 1;
  const Tensor e = Tensor::empty({0, kMax}, DType::F32);
  const Tensor v = e.narrow(1, kMax, 0);
  CHECK(v.shape() == Shape{0, 0});
  CHECK(v.storage_offset() == 0);
  CHECK(v.data_ptr() == e.storage()->data());
  const Tensor w = Tensor::empty({0, k62, 2}, DType::F64).narrow(1, k62, 0).narrow(2, 2, 0);
  CHECK(w.storage_offset() == 0);
  // Still a view of the same storage; a non-empty narrow still moves.
  const Tensor t = Tensor::zeros({4, 3}, DType::F32);
  CHECK(t.narrow(0, 4, 0).shares_storage_with(t));
  CHECK(t.narrow(0, 4, 0).storage_offset() == 0);
  CHECK(t.narrow(0, 2, 1).storage_offset() == 6);
  // rand_slice of an empty box at the far corner of a global shape of
  // 2^63 - 2 elements: its flat offset, 3 * (2^62 - 1), overflowed.
  const Tensor r = Tensor::rand_slice({2, k62}, {2, k62}, {0, 0}, DType::F32, 1);
  CHECK(r.shape() == Shape{0, 0});
  CHECK_THROWS_AS(Tensor::rand_slice({kMax, 2}, {0, 0}, {0, 0}, DType::F32, 1),
                  dtensor::InvalidArgument);
}

// The row walk of two strided views (core/detail/strided_loop.h) simplifies
// its loop nest (drops extent-1 dims, merges dims both views step over as
// one run, puts the longest dim inside when the innermost is short). Against
// a naive walk of every multi-index: the same pairs of offsets, each once,
// on random shapes and strides built to merge, to not merge, and with short
// innermost dims.
TEST_CASE("for_each_row visits every pair of elements once, however it simplifies the nest",
          "[tensor][strided]") {
  std::mt19937 rng(5);
  const auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  int merged = 0, swapped = 0;
  for (int trial = 0; trial < 500; ++trial) {
    // One trial in ten has more dims than a nest holds inline
    // (DimList::kInline), extents 1 or 2 so that it stays small.
    static_assert(dtensor::detail::DimList::kInline < 9);
    const bool deep = trial % 10 == 0;
    const auto nd = static_cast<std::size_t>(deep ? pick(9, 11) : pick(0, 5));
    Shape shape(nd);
    for (auto& e : shape)
      e = deep ? pick(1, 2) : pick(1, 6) == 1 ? 1 : pick(1, 9);
    // Strides: each view dense over a padded box, or a dim taken from the
    // next one's extent (so that the pair merges), or anything.
    const auto strides = [&] {
      Shape s(nd);
      std::int64_t step = pick(1, 2);
      for (std::size_t d = nd; d-- > 0;) {
        s[d] = pick(0, 3) == 0 ? static_cast<std::int64_t>(pick(1, 40)) : step;
        step = s[d] * (shape[d] + pick(0, 1));
      }
      return s;
    };
    const Shape sa = strides(), sb = strides();
    std::multiset<std::pair<std::int64_t, std::int64_t>> want, got;
    std::vector<std::int64_t> idx(nd, 0);
    const std::int64_t total = dtensor::shape_numel(shape);
    for (std::int64_t k = 0; k < total; ++k) {
      std::int64_t rest = k, a = 3, b = 7;  // the views' offsets
      for (std::size_t d = nd; d-- > 0;) {
        const std::int64_t i = rest % shape[d];
        rest /= shape[d];
        a += i * sa[d];
        b += i * sb[d];
      }
      want.insert({a, b});
    }
    dtensor::detail::for_each_row(
        shape, sa, 3, sb, 7,
        [&](std::int64_t a, std::int64_t b, std::int64_t n, std::int64_t ra, std::int64_t rb) {
          for (std::int64_t k = 0; k < n; ++k)
            got.insert({a + k * ra, b + k * rb});
        });
    INFO("trial " << trial << " shape " << dtensor::shape_str(shape) << " strides "
                  << dtensor::shape_str(sa) << " and " << dtensor::shape_str(sb));
    REQUIRE(got == want);
    const auto nest = dtensor::detail::simplified_nest(shape, sa, sb);
    std::size_t non_unit = 0;
    for (auto e : shape)
      non_unit += e > 1;
    merged += nest.shape.size() < non_unit;
    swapped += !nest.shape.empty() && nest.shape.back() >= 16 && shape.back() < 16;
  }
  // The cases exercised what they are meant to.
  CHECK(merged > 50);
  CHECK(swapped > 20);
}
