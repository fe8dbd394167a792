// Operators never modify their inputs, and their outputs never share storage
// with their inputs — except where documented: DTensor::redistribute returns
// *this (sharing the local tensor) when nothing changes
// (include/dtensor/placement/dtensor.h). Inputs are compared bit for bit
// before and after each call, on every rank.
#include <catch2/catch.hpp>
#include <cstring>
#include <vector>

#include "dtensor/dtensor.h"
#include "tests/support/multiprocess.h"

using namespace dtensor;
using namespace dtensor::testing;

namespace {

// A deep copy of every input's local tensor, compared bit for bit later.
class Snapshot {
 public:
  explicit Snapshot(const std::vector<const DTensor*>& inputs) : inputs_(inputs) {
    for (const DTensor* d : inputs)
      copies_.push_back(d->to_local().clone());
  }
  void require_unchanged(const std::string& what) const {
    for (std::size_t i = 0; i < inputs_.size(); ++i) {
      INFO(what << ": input " << i);
      const Tensor now = inputs_[i]->to_local().contiguous();
      REQUIRE(now.shape() == copies_[i].shape());
      REQUIRE(std::memcmp(now.data_ptr(), copies_[i].data_ptr(), now.nbytes()) == 0);
    }
  }
  void require_no_alias(const std::string& what, const DTensor& out) const {
    for (std::size_t i = 0; i < inputs_.size(); ++i) {
      INFO(what << ": output shares storage with input " << i);
      // An empty local tensor holds no data to share.
      if (out.to_local().numel() == 0) continue;
      CHECK_FALSE(out.to_local().shares_storage_with(inputs_[i]->to_local()));
    }
  }

 private:
  std::vector<const DTensor*> inputs_;
  std::vector<Tensor> copies_;
};

ConvParams conv_params() {
  ConvParams p;
  p.stride = {1, 2};
  p.padding = {{1, 1}, {2, 0}};
  p.dilation = {1, 1};
  return p;
}

std::vector<Placement> per_dim_choices() {
  return {Replicate(), Shard(0), Shard(1), Partial()};
}

}  // namespace

TEST_CASE(
    "immutability: convolution and its backward leave inputs untouched, outputs unaliased "
    "P=4",
    "[reliability][immutability]") {
  run_ranks(4, [](RankContext&) {
    DeviceMesh mesh(DeviceType::CPU, {2, 2});
    for (const Placements& xp : {Placements{Shard(2), Shard(3)}, Placements{Shard(0), Shard(3)},
                                 Placements{Replicate(), Replicate()}}) {
      INFO("input " << placements_str(xp));
      const auto x = distribute_tensor(Tensor::rand({2, 4, 9, 11}, DType::F64, 1), mesh, xp);
      const auto w = distribute_tensor(Tensor::rand({3, 4, 3, 3}, DType::F64, 2), mesh,
                                       {Replicate(), Replicate()});
      const auto b =
          distribute_tensor(Tensor::rand({3}, DType::F64, 3), mesh, {Replicate(), Replicate()});
      Snapshot snap({&x, &w, &b});
      const DTensor y = convolution(x, w, b, conv_params());
      snap.require_unchanged("convolution");
      snap.require_no_alias("convolution", y);

      const auto gy =
          distribute_tensor(Tensor::rand(y.shape(), DType::F64, 4), mesh, y.placements());
      Snapshot snap2({&gy, &x, &w});
      const ConvGrads g = convolution_backward(gy, x, w, conv_params());
      snap2.require_unchanged("convolution_backward");
      for (const auto* out : {&*g.grad_input, &*g.grad_weight, &*g.grad_bias})
        snap2.require_no_alias("convolution_backward", *out);
    }
  });
}

TEST_CASE("immutability: redistribute between every pair of placements on a 2x2 mesh P=4",
          "[reliability][immutability]") {
  run_ranks(4, [](RankContext&) {
    DeviceMesh mesh(DeviceType::CPU, {2, 2});
    const Tensor global = Tensor::rand({5, 7}, DType::F32, 9);
    const Tensor global_copy = global.clone();
    int pairs = 0;
    for (const auto& s0 : per_dim_choices())
      for (const auto& s1 : per_dim_choices()) {
        const DTensor x = distribute_tensor(global, mesh, {s0, s1});
        for (const auto& d0 : per_dim_choices())
          for (const auto& d1 : per_dim_choices()) {
            const Placements dst{d0, d1};
            if ((s0.is_shard() && d0.is_partial()) || (s1.is_shard() && d1.is_partial()))
              continue;  // S -> P is an error, not a transition
            const std::string what = placements_str(x.placements()) + " -> " + placements_str(dst);
            Snapshot snap({&x});
            const DTensor y = x.redistribute(mesh, dst);
            snap.require_unchanged(what);
            if (dst == x.placements()) {
              // Documented: nothing changes, so *this comes back.
              CHECK(y.to_local().shares_storage_with(x.to_local()));
            } else {
              snap.require_no_alias(what, y);
            }
            ++pairs;
          }
      }
    CHECK(pairs > 100);
    // distribute_tensor read the global tensor; it did not write it.
    REQUIRE(std::memcmp(global.data_ptr(), global_copy.data_ptr(), global.nbytes()) == 0);
    // full_tensor() is a fresh tensor, except of a replicated tensor: then it
    // is the local tensor itself (documented in dtensor.h, as in PyTorch).
    const DTensor r = distribute_tensor(global, mesh, {Replicate(), Replicate()});
    CHECK(r.full_tensor().shares_storage_with(r.to_local()));
    const DTensor s = distribute_tensor(global, mesh, {Shard(0), Replicate()});
    CHECK_FALSE(s.full_tensor().shares_storage_with(s.to_local()));
  });
}

TEST_CASE("immutability: pointwise operators leave inputs untouched, outputs unaliased P=4",
          "[reliability][immutability]") {
  run_ranks(4, [](RankContext&) {
    DeviceMesh mesh(DeviceType::CPU, {2, 2});
    for (const Placements& p : {Placements{Shard(0), Shard(1)}, Placements{Replicate(), Shard(0)},
                                Placements{Partial(), Replicate()}}) {
      INFO(placements_str(p));
      const auto a = distribute_tensor(Tensor::rand({6, 5}, DType::F64, 1), mesh, p);
      const auto b = distribute_tensor(Tensor::rand({6, 5}, DType::F64, 2), mesh, p);
      Snapshot snap({&a, &b});
      const std::vector<std::pair<std::string, std::function<DTensor()>>> ops = {
          {"add", [&] { return add(a, b); }},
          {"mul", [&] { return mul(a, b); }},
          {"scale", [&] { return scale(a, 1.5); }},
          {"relu", [&] { return relu(a); }},
          {"relu_backward", [&] { return relu_backward(a, b); }},
          {"sum", [&] { return sum(a); }},
          {"mean", [&] { return mean(a); }},
      };
      for (const auto& [name, op] : ops) {
        const DTensor out = op();
        snap.require_unchanged(name);
        snap.require_no_alias(name, out);
      }
    }
  });
}
