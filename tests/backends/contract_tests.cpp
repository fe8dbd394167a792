// The validating layer stands in front of every backend, one a user registers
// included: a backend that refuses every call it receives ("reached the
// backend") shows which calls get through. Bad arguments and messages a rank
// sends to itself never do; good calls do (so the test can tell); subgroups
// the backend makes are wrapped alike; and the backend's accepts_device
// decides which tensors the layer lets through.
#include <catch2/catch.hpp>

#include <atomic>
#include <string>
#include <vector>

#include "dtensor/core/distributed.h"
#include "dtensor/core/errors.h"
#include "tests/support/multiprocess.h"

using namespace dtensor;
using namespace dtensor::testing;
using Catch::Matchers::Contains;

namespace {

constexpr const char* kReached = "reached the backend";
std::atomic<int> g_reached{0};

// Counts and refuses what it is asked; knows its rank and size only.
class RefusingGroup final : public ProcessGroup {
 public:
  RefusingGroup(int rank, int size, bool takes_cpu)
      : rank_(rank), size_(size), takes_cpu_(takes_cpu) {
    for (int r = 0; r < size; ++r)
      global_.push_back(r);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend_name() const override { return "refusing"; }
  const std::vector<int>& global_ranks() const override { return global_; }
  std::chrono::milliseconds timeout() const override { return std::chrono::milliseconds(2000); }
  bool accepts_device(Device device) const override { return takes_cpu_ && device.is_cpu(); }

  std::shared_ptr<Work> isend(const Tensor&, int, int) override { refuse(); }
  std::shared_ptr<Work> irecv(const Tensor&, int, int) override { refuse(); }
  std::vector<std::shared_ptr<Work>> batch_isend_irecv(const std::vector<P2POp>&) override {
    refuse();
  }
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
  // A subgroup of the members, made without talking (nothing is ever sent).
  std::shared_ptr<ProcessGroup> new_subgroup(const std::vector<int>& ranks) override {
    ++g_reached;
    int me = 0;
    while (ranks[static_cast<std::size_t>(me)] != rank_)
      ++me;
    return std::make_shared<RefusingGroup>(me, static_cast<int>(ranks.size()), takes_cpu_);
  }

 private:
  [[noreturn]] void refuse() {
    ++g_reached;
    // InvalidArgument: bad input for the fault monitor, so the job goes on.
    throw InvalidArgument("refusing", kReached);
  }
  int rank_, size_;
  bool takes_cpu_;
  std::vector<int> global_;
};

void init_refusing(bool takes_cpu) {
  register_process_group_backend("refusing", [takes_cpu](const BackendInit& init) {
    return std::make_shared<RefusingGroup>(init.rank, init.world_size, takes_cpu);
  });
  InitOptions o;
  o.backend = "refusing";
  init_process_group(o);
}

}  // namespace

TEST_CASE("contract: bad arguments to a user's backend never reach it P=2", "[contract][mp]") {
  RunOptions o;
  o.init_process_group = false;
  run_ranks(
      2,
      [](RankContext&) {
        init_refusing(true);
        auto g = world();
        Tensor t = Tensor::zeros({4}, DType::F32), undefined;
        Tensor strided = Tensor::zeros({4, 4}, DType::F32).narrow(1, 0, 2);
        CHECK_THROWS_MATCHES(
            g->isend(t, 2, 0), InvalidArgument,
            Catch::Matchers::Message(
                "[dtensor.refusing] isend: dst=2 is outside the group of 2 ranks"));
        CHECK_THROWS_WITH(g->irecv(t, 1 - g->rank(), -1), Contains("tag=-1 must be >= 0"));
        CHECK_THROWS_WITH(g->allreduce(strided), Contains("must be contiguous"));
        CHECK_THROWS_WITH(g->broadcast(undefined, 0), Contains("t is an undefined tensor"));
        CHECK_THROWS_WITH(g->allgather(t, t, {4}), Contains("counts has 1 entries"));
        CHECK_THROWS_WITH(g->reduce_scatter(t, t, {2, -2}), Contains("counts[1]=-2 is negative"));
        CHECK_THROWS_WITH(g->all_to_all(t, {2, 2}, t, {2, 2}),
                          Contains("in and out must not share storage"));
        CHECK_THROWS_WITH(g->batch_isend_irecv({P2POp::send(t, 1 - g->rank()), P2POp::send(t, 5)}),
                          Contains("dst=5"));
        CHECK_THROWS_WITH(g->new_subgroup({1, 1}), Contains("strictly increasing"));
        CHECK_THROWS_WITH(g->split_groups({{0, 1}, {1}}), Contains("groups"));
        CHECK(g_reached == 0);
        // Messages to oneself are delivered by the layer, in a batch too.
        Tensor in = Tensor::full({3}, 5.0, DType::F64), out = Tensor::zeros({3}, DType::F64);
        auto r = g->irecv(out, g->rank(), 3);
        g->isend(in, g->rank(), 3)->wait();
        r->wait();
        CHECK(out.data<double>()[2] == 5.0);
        auto works =
            g->batch_isend_irecv({P2POp::send(in, g->rank(), 4), P2POp::recv(out, g->rank(), 4)});
        wait_all(works);
        CHECK(g_reached == 0);
        // Good calls get through: the counter above can tell.
        CHECK_THROWS_WITH(g->allreduce(t), Contains(kReached));
        CHECK_THROWS_WITH(g->isend(t, 1 - g->rank(), 0), Contains(kReached));
        CHECK(g_reached == 2);
        // The subgroup the backend makes is wrapped too.
        auto sub = g->new_subgroup({g->rank()});
        CHECK(g_reached == 3);
        CHECK_THROWS_WITH(sub->isend(t, 1, 0), Contains("dst=1 is outside the group of 1 ranks"));
        CHECK(g_reached == 3);
        destroy_process_group();
      },
      o);
}

TEST_CASE("contract: a backend's accepts_device decides which tensors reach it P=2",
          "[contract][mp]") {
  RunOptions o;
  o.init_process_group = false;
  run_ranks(
      2,
      [](RankContext&) {
        init_refusing(false);
        Tensor t = Tensor::zeros({4}, DType::F32);
        CHECK_THROWS_MATCHES(
            world()->allreduce(t), InvalidArgument,
            Catch::Matchers::Message(
                "[dtensor.refusing] allreduce: t is on cpu, a device the refusing backend does "
                "not take"));
        CHECK(g_reached == 0);
        destroy_process_group();
      },
      o);
}

TEST_CASE(
    "contract: a message to oneself of the wrong size fails both sides, one never sent "
    "times out",
    "[contract]") {
  RunOptions o;
  o.init_process_group = false;
  run_ranks(
      1,
      [](RankContext&) {
        init_refusing(true);
        auto g = world();
        Tensor big = Tensor::zeros({8}, DType::F32), small = Tensor::zeros({4}, DType::F32);
        auto r = g->irecv(small, 0, 1);
        auto s = g->isend(big, 0, 1);
        CHECK_THROWS_MATCHES(s->wait(), CommError,
                             Catch::Matchers::Message(
                                 "[dtensor.refusing] send to rank 0 (itself) tag 1: 32 bytes sent "
                                 "but the receive expects 16"));
        CHECK_THROWS_AS(r->wait(), CommError);
        Tensor lonely = Tensor::zeros({1}, DType::F32);
        CHECK_THROWS_WITH(g->irecv(lonely, 0, 2)->wait(std::chrono::milliseconds(50)),
                          Contains("recv from rank 0 (itself) tag 2: timed out after 50 ms"));
        CHECK(g_reached == 0);
        destroy_process_group();
      },
      o);
}
