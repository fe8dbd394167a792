// The CUDA/cuDNN/NCCL backends' logic that runs without a GPU: error and dtype
// mapping, the cuDNN plan and descriptors, kernel layouts, the collective
// plans, the watchdog and the algorithm cache. Built only with CUDA.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <random>
#include <vector>

#include "backends/cuda/algo_cache.h"
#include "backends/cuda/cuda_errors.h"
#include "backends/cuda/cudnn_descriptors.h"
#include "backends/cuda/cudnn_plan.h"
#include "backends/cuda/dropout.h"
#include "backends/cuda/elementwise.h"
#include "backends/cuda/reduce.h"
#include "backends/nccl/collective_plan.h"
#include "backends/nccl/nccl_types.h"
#include "backends/nccl/watchdog.h"
#include "dtensor/core/errors.h"

using namespace dtensor;
using namespace dtensor::cuda_backend;
using namespace dtensor::nccl_backend;

TEST_CASE("cuda build: links cuDNN 9 and NCCL", "[cuda][unit]") {
  CHECK(cudnnGetVersion() >= 90000);
  int v = 0;
  CHECK(ncclGetVersion(&v) == ncclSuccess);
  CHECK(v >= 21800);
}

TEST_CASE("error mapping: CUDA, cuDNN and NCCL codes become typed errors", "[cuda][unit]") {
  CHECK(classify_cuda_error(cudaErrorInvalidValue) == ErrorKind::InvalidArgument);
  CHECK(classify_cuda_error(cudaErrorNoDevice) == ErrorKind::NotSupported);
  CHECK(classify_cuda_error(cudaErrorInsufficientDriver) == ErrorKind::NotSupported);
  CHECK(classify_cuda_error(cudaErrorMemoryAllocation) == ErrorKind::OutOfMemory);
  CHECK(classify_cuda_error(cudaErrorLaunchFailure) == ErrorKind::Internal);
  CHECK_NOTHROW(check_cuda(cudaSuccess, "ok"));
  CHECK_THROWS_AS(check_cuda(cudaErrorNoDevice, "probe"), NotSupported);
  CHECK_THROWS_WITH(
      check_cuda(cudaErrorInvalidValue, "probe"),
      Catch::Contains("[dtensor.cuda] probe") && Catch::Contains("cudaErrorInvalidValue"));

  CHECK(classify_cudnn_status(CUDNN_STATUS_BAD_PARAM) == ErrorKind::InvalidArgument);
  CHECK(classify_cudnn_status(CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH) == ErrorKind::InvalidArgument);
  CHECK(classify_cudnn_status(CUDNN_STATUS_NOT_SUPPORTED_PADDING) == ErrorKind::NotSupported);
  CHECK(classify_cudnn_status(CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED) ==
        ErrorKind::OutOfMemory);
  CHECK(classify_cudnn_status(CUDNN_STATUS_EXECUTION_FAILED) == ErrorKind::Internal);
  CHECK_THROWS_AS(check_cudnn(CUDNN_STATUS_NOT_SUPPORTED, "conv"), NotSupported);

  CHECK(classify_nccl_result(ncclInvalidUsage) == ErrorKind::InvalidArgument);
  CHECK(classify_nccl_result(ncclRemoteError) == ErrorKind::Comm);
  CHECK(classify_nccl_result(ncclSystemError) == ErrorKind::Comm);
  CHECK_NOTHROW(check_nccl(ncclInProgress, "non-blocking call accepted"));
  CHECK_THROWS_AS(check_nccl(ncclRemoteError, "allreduce"), CommError);
  CHECK_THROWS_AS(check_nccl(ncclInvalidArgument, "allreduce"), InvalidArgument);
}

TEST_CASE("dtype mapping: cuDNN data, compute and math types, NCCL types and ops", "[cuda][unit]") {
  const auto f32 = cudnn_types(DType::F32);
  CHECK(f32.data == CUDNN_DATA_FLOAT);
  CHECK(f32.compute == CUDNN_DATA_FLOAT);
  CHECK(f32.math == CUDNN_FMA_MATH);  // no TF32
  const auto bf16 = cudnn_types(DType::BF16);
  CHECK(bf16.data == CUDNN_DATA_BFLOAT16);
  CHECK(bf16.compute == CUDNN_DATA_FLOAT);
  CHECK(bf16.math == CUDNN_TENSOR_OP_MATH);
  CHECK(cudnn_types(DType::F64).compute == CUDNN_DATA_DOUBLE);
  const auto f16 = cudnn_types(DType::F16);  // half data, f32 accumulation
  CHECK(f16.data == CUDNN_DATA_HALF);
  CHECK(f16.compute == CUDNN_DATA_FLOAT);
  CHECK(f16.math == CUDNN_TENSOR_OP_MATH);
  CHECK(nccl_dtype(DType::F16) == ncclFloat16);
  CHECK(nccl_dtype(DType::F32) == ncclFloat32);
  CHECK(nccl_dtype(DType::F64) == ncclFloat64);
  CHECK(nccl_dtype(DType::BF16) == ncclBfloat16);
  CHECK(nccl_op(ReduceOp::Sum) == ncclSum);
  CHECK(nccl_op(ReduceOp::Avg) == ncclAvg);
  CHECK(nccl_op(ReduceOp::Max) == ncclMax);
  CHECK(nccl_op(ReduceOp::Min) == ncclMin);
}

TEST_CASE("cudnn plan: 1-D promotion and asymmetric padding", "[cuda][unit]") {
  ConvParams p;
  p.stride = {2};
  p.padding = {{3, 1}};
  p.dilation = {2};
  ConvParams q = p.expanded(1);
  q.groups = 2;
  const auto plan = plan_cudnn_conv({2, 4, 10}, {6, 2, 3}, q);
  CHECK(plan.promoted_1d);
  CHECK(plan.needs_prepad());
  CHECK(plan.prepad == std::vector<std::pair<std::int64_t, std::int64_t>>{{2, 0}});
  CHECK(plan.padded_input == Shape{2, 4, 12});
  CHECK(plan.x == Shape{2, 4, 1, 12});
  CHECK(plan.w == Shape{6, 2, 1, 3});
  // floor((10 + 3 + 1 - 5) / 2) + 1 = 5
  CHECK(plan.y == Shape{2, 6, 1, 5});
  CHECK(plan.pad == std::vector<int>{0, 1});
  CHECK(plan.stride == std::vector<int>{1, 2});
  CHECK(plan.dilation == std::vector<int>{1, 2});
  CHECK(plan.groups == 2);
  CHECK(plan.key(ConvPass::Forward, DType::F32, 0) !=
        plan.key(ConvPass::BackwardData, DType::F32, 0));
  CHECK(plan.key(ConvPass::Forward, DType::F32, 0) != plan.key(ConvPass::Forward, DType::BF16, 0));
}

TEST_CASE("cudnn plan: symmetric 2-D and 3-D need no extra zeros", "[cuda][unit]") {
  ConvParams p;
  p.padding = {{1, 1}};
  const auto p2 = plan_cudnn_conv({1, 3, 8, 7}, {5, 3, 3, 3}, p.expanded(2));
  CHECK_FALSE(p2.promoted_1d);
  CHECK_FALSE(p2.needs_prepad());
  CHECK(p2.y == Shape{1, 5, 8, 7});
  const auto p3 = plan_cudnn_conv({1, 2, 4, 5, 6}, {2, 2, 1, 2, 3}, ConvParams{}.expanded(3));
  CHECK(p3.y == Shape{1, 2, 4, 4, 4});
  CHECK(p3.pad == std::vector<int>{0, 0, 0});
}

TEST_CASE("cudnn descriptors: cuDNN agrees with the plan's output shape", "[cuda][unit]") {
  // Descriptor calls are host-only in cuDNN 9; if this cuDNN wants a driver
  // even for them, say so and skip.
  struct Case {
    Shape x, w;
    ConvParams p;
  };
  ConvParams asym;
  asym.padding = {{0, 3}, {2, 1}};
  asym.stride = {2, 1};
  asym.dilation = {1, 2};
  ConvParams one_d;
  one_d.padding = {{4, 1}};
  one_d.stride = {3};
  const Case cases[] = {{{2, 4, 9, 11}, {3, 4, 3, 2}, asym}, {{1, 2, 17}, {4, 2, 5}, one_d}};
  try {
    for (const auto& c : cases) {
      const ConvParams p = c.p.expanded(static_cast<std::int64_t>(c.x.size()) - 2);
      const auto plan = plan_cudnn_conv(c.x, c.w, p);
      for (DType t : {DType::F32, DType::F64, DType::BF16}) {
        const auto ty = cudnn_types(t);
        TensorDesc xd(plan.x, ty.data);
        FilterDesc wd(plan.w, ty.data);
        ConvDesc cd(plan, ty);
        CHECK(cudnn_output_shape(xd, wd, cd, static_cast<int>(plan.y.size())) == plan.y);
      }
      // And the plan agrees with the library's own shape rule.
      Shape y = plan.y;
      if (plan.promoted_1d) y.erase(y.begin() + 2);
      CHECK(y == conv_output_shape(c.x, c.w, p));
    }
  } catch (const dtensor::Error& e) {
    WARN("skipped: cuDNN descriptors need a driver here: " << e.what());
  }
}

TEST_CASE("kernel layouts: contiguous dims merge, strided ones stay", "[cuda][unit]") {
  const auto flat = make_layout({4, 5, 6}, {30, 6, 1}, {30, 6, 1});
  CHECK(flat.ndim == 1);
  CHECK(flat.sizes[0] == 120);
  CHECK(flat.numel == 120);
  // A narrowed source (row stride 8 of 6 used) stays 2-D.
  const auto narrowed = make_layout({4, 1, 6}, {6, 6, 1}, {8, 8, 1});
  CHECK(narrowed.ndim == 2);
  CHECK(narrowed.src_strides[0] == 8);
  const auto transposed = make_layout({3, 4}, {4, 1}, {1, 3});
  CHECK(transposed.ndim == 2);
  // Nine dims, the source fully transposed: nothing merges.
  Shape big(9, 2), ds(9), rev(9);
  for (std::size_t d = 0; d < 9; ++d) {
    ds[d] = std::int64_t{1} << (8 - d);
    rev[d] = std::int64_t{1} << d;
  }
  CHECK_THROWS_AS(make_layout(big, ds, rev), InvalidArgument);
}

// Walks a layout as the copy kernel does: the source offset of every
// destination element, in destination order.
std::vector<std::int64_t> source_offsets(const StridedLayout& l) {
  std::vector<std::int64_t> out(static_cast<std::size_t>(l.numel), -1);
  std::vector<std::int64_t> idx(static_cast<std::size_t>(l.ndim), 0);
  for (std::int64_t k = 0; k < l.numel; ++k) {
    std::int64_t dst = 0, src = 0;
    for (int d = 0; d < l.ndim; ++d) {
      dst += idx[static_cast<std::size_t>(d)] * l.dst_strides[d];
      src += idx[static_cast<std::size_t>(d)] * l.src_strides[d];
    }
    out[static_cast<std::size_t>(dst)] = src;
    for (int d = l.ndim; d-- > 0;) {
      if (++idx[static_cast<std::size_t>(d)] < l.sizes[d]) break;
      idx[static_cast<std::size_t>(d)] = 0;
    }
  }
  return out;
}

TEST_CASE("broadcast layouts: a copy reads every element where NumPy broadcasting puts it",
          "[cuda][unit]") {
  // [3, 1] and [4] to [2, 3, 4]; [1] to [5]; [2, 3, 4] to itself.
  const Shape to{2, 3, 4};
  const auto col =
      source_offsets(make_layout(to, contiguous_strides(to), broadcast_strides({3, 1}, to)));
  const auto row =
      source_offsets(make_layout(to, contiguous_strides(to), broadcast_strides({4}, to)));
  const auto same =
      source_offsets(make_layout(to, contiguous_strides(to), broadcast_strides(to, to)));
  for (std::int64_t n = 0; n < 2; ++n)
    for (std::int64_t i = 0; i < 3; ++i)
      for (std::int64_t j = 0; j < 4; ++j) {
        const auto k = static_cast<std::size_t>((n * 3 + i) * 4 + j);
        CHECK(col[k] == i);  // element (i, 0) of [3, 1]
        CHECK(row[k] == j);  // element j of [4]
        CHECK(same[k] == static_cast<std::int64_t>(k));
      }
  const auto scalar = source_offsets(make_layout({5}, {1}, broadcast_strides({1}, {5})));
  CHECK(scalar == std::vector<std::int64_t>(5, 0));
  CHECK_THROWS_AS(broadcast_strides({3}, {2, 4}), InvalidArgument);
  CHECK_THROWS_AS(broadcast_strides({2, 2, 4}, {2, 4}), InvalidArgument);
}

TEST_CASE("collective plans: uneven allgather, all-to-all, reduce-scatter", "[cuda][unit]") {
  CHECK(offsets_of({3, 0, 2}) == std::vector<std::int64_t>{0, 3, 3});
  CHECK(all_equal({2, 2, 2}));
  CHECK_FALSE(all_equal({2, 1}));
  const auto ag = plan_allgather(1, {3, 2, 0});
  REQUIRE(ag.sends.size() == 2);  // rank 2 owns nothing but still needs our block
  CHECK(ag.sends[1].peer == 2);
  REQUIRE(ag.recvs.size() == 1);  // rank 2 has nothing
  CHECK(ag.recvs[0].peer == 0);
  CHECK(ag.recvs[0].count == 3);
  CHECK(ag.self_dst == 3);
  CHECK(ag.self_count == 2);
  const auto a2a = plan_all_to_all(0, {1, 2, 0}, {1, 0, 4});
  REQUIRE(a2a.sends.size() == 1);
  CHECK(a2a.sends[0].peer == 1);
  CHECK(a2a.sends[0].offset == 1);
  REQUIRE(a2a.recvs.size() == 1);
  CHECK(a2a.recvs[0].peer == 2);
  CHECK(a2a.recvs[0].offset == 1);
  CHECK(a2a.self_count == 1);
  CHECK(plan_reduce_scatter({4, 4}).native);
  const auto rs = plan_reduce_scatter({3, 3, 1});
  CHECK_FALSE(rs.native);
  REQUIRE(rs.roots.size() == 3);
  CHECK(rs.roots[2].offset == 6);
  CHECK(rs.roots[2].count == 1);
}

TEST_CASE("watchdog: completes, fails with abort, times out with abort", "[cuda][unit]") {
  int polls = 0, aborts = 0;
  watch(
      "op",
      [&] {
        return Poll{++polls < 3 ? PollStatus::Pending : PollStatus::Done, {}};
      },
      [&] { ++aborts; }, std::chrono::milliseconds(1000));
  CHECK(polls == 3);
  CHECK(aborts == 0);
  CHECK_THROWS_AS(watch(
                      "op",
                      [] {
                        return Poll{PollStatus::Failed, "remote error"};
                      },
                      [&] { ++aborts; }, std::chrono::milliseconds(1000)),
                  CommError);
  CHECK(aborts == 1);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    watch(
        "allreduce", [] { return Poll{}; }, [&] { ++aborts; }, std::chrono::milliseconds(50));
    FAIL("no timeout");
  } catch (const TimeoutError& e) {
    CHECK_THAT(std::string(e.what()), Catch::Contains("allreduce") && Catch::Contains("aborted"));
  }
  CHECK(aborts == 2);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(2));
}

TEST_CASE("algorithm cache: chosen once per key", "[cuda][unit]") {
  AlgoCache<int> cache;
  int chosen = 0;
  CHECK(cache.get("a", [&] { return ++chosen; }) == 1);
  CHECK(cache.get("a", [&] { return ++chosen; }) == 1);
  CHECK(cache.get("b", [&] { return ++chosen; }) == 2);
  CHECK(chosen == 2);
  CHECK(cache.size() == 2);
  CHECK(cache.hits() == 1);
  CHECK(cache.misses() == 2);
}

TEST_CASE("split plan: color is the row, key the rank in it, no color outside every row",
          "[cuda][unit][nccl]") {
  // A 2x3 mesh over 6 ranks: dim 1's rows are {0,1,2} and {3,4,5}; dim 0's
  // are {0,3}, {1,4}, {2,5}.
  const std::vector<std::vector<int>> dim1{{0, 1, 2}, {3, 4, 5}};
  const std::vector<std::vector<int>> dim0{{0, 3}, {1, 4}, {2, 5}};
  const SplitArgs a = plan_split(dim1, 4, 6);
  CHECK(a.color == 1);
  CHECK(a.key == 1);
  CHECK(a.size == 3);
  const SplitArgs b = plan_split(dim0, 4, 6);
  CHECK(b.color == 1);
  CHECK(b.key == 1);
  CHECK(b.size == 2);
  CHECK(plan_split(dim0, 5, 6).color == 2);
  CHECK(plan_split(dim0, 0, 6).key == 0);
  // Rank 6 of 7 is in no row: NCCL_SPLIT_NOCOLOR.
  const SplitArgs none = plan_split(dim1, 6, 7);
  CHECK(none.color == NCCL_SPLIT_NOCOLOR);
  CHECK(none.size == 0);
}

TEST_CASE("split plan: bad lists are InvalidArgument naming groups", "[cuda][unit][nccl]") {
  using L = std::vector<std::vector<int>>;
  for (const L& bad : {L{{0, 1}, {1, 2}}, L{{1, 0}}, L{{0, 4}}, L{{0}, {}}, L{{-1, 0}}}) {
    CHECK_THROWS_AS(plan_split(bad, 0, 4), InvalidArgument);
    CHECK_THROWS_WITH(plan_split(bad, 0, 4), Catch::Contains("groups"));
  }
}

namespace {
// The multi-index of element e of a row-major `shape`.
std::vector<std::int64_t> multi_index(const Shape& shape, std::int64_t e) {
  std::vector<std::int64_t> idx(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    idx[d] = e % shape[d];
    e /= shape[d];
  }
  return idx;
}
}  // namespace

TEST_CASE("reduce layouts: each result folds exactly its elements, in x's order", "[cuda][unit]") {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    const std::size_t nd = 1 + rng() % 4;
    Shape shape(nd);
    std::vector<bool> reduced(nd);
    for (std::size_t d = 0; d < nd; ++d) {
      shape[d] = 1 + static_cast<std::int64_t>(rng() % 4);
      reduced[d] = rng() % 2 == 0;
    }
    const ReduceLayout L = make_reduce_layout(shape, reduced, "test");
    // Naive: the keepdim result of element e has e's index with the reduced
    // dims set to 0, numbered row-major over the kept dims.
    const auto result_of = [&](std::int64_t e) {
      const auto idx = multi_index(shape, e);
      std::int64_t r = 0;
      for (std::size_t d = 0; d < nd; ++d)
        if (!reduced[d]) r = r * shape[d] + idx[d];
      return r;
    };
    std::vector<std::vector<std::int64_t>> want(static_cast<std::size_t>(L.results));
    for (std::int64_t e = 0; e < shape_numel(shape); ++e) {
      want.at(static_cast<std::size_t>(result_of(e))).push_back(e);
      CHECK(reduce_result_of(L, e) == result_of(e));
    }
    CHECK(L.numel == shape_numel(shape));
    for (std::int64_t r = 0; r < L.results; ++r) {
      std::vector<std::int64_t> got;
      for (std::int64_t k = 0; k < L.per_result; ++k)
        got.push_back(reduce_offset_over(L, r, false) + reduce_offset_over(L, k, true));
      CHECK(got == want[static_cast<std::size_t>(r)]);  // ascending: x's order
    }
  }
  // A 0-d x is one element and one result.
  const ReduceLayout scalar = make_reduce_layout({}, {}, "test");
  CHECK(scalar.results == 1);
  CHECK(scalar.per_result == 1);
  CHECK_THROWS_AS(make_reduce_layout(Shape(9, 1), std::vector<bool>(9, true), "sum_dims"),
                  InvalidArgument);
}

TEST_CASE("dropout parts: an element's global index is its place in the whole tensor",
          "[cuda][unit]") {
  const Shape global{4, 5, 6}, local{2, 3, 4}, offset{1, 2, 1};
  const DropoutPart part = make_dropout_part(local, offset, global);
  for (std::int64_t e = 0; e < shape_numel(local); ++e) {
    const auto idx = multi_index(local, e);
    const std::int64_t want =
        ((offset[0] + idx[0]) * 5 + offset[1] + idx[1]) * 6 + offset[2] + idx[2];
    CHECK(dropout_global_index(part, e) == want);
  }
  CHECK(dropout_global_index(make_dropout_part({}, {}, {}), 0) == 0);
}
