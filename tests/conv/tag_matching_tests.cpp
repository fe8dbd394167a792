// The convolution handlers post their halo exchange before the call's
// agreement check is confirmed only where the group keeps messages with
// different tags apart (ProcessGroup::matches_by_tag). A backend that matches
// by order, or does not say, gets the check confirmed before anything is
// posted. Checked with a real Gloo group wrapped to answer either way and to
// log, in order, the halo messages posted and the agreement receives waited for.
#include <catch2/catch.hpp>

#include <mutex>
#include <string>
#include <vector>

#include "backends/gloo/gloo_process_group.h"
#include "dtensor/dtensor.h"
#include "dtensor/placement/rank_agreement.h"
#include "tests/conv/conv_case.h"
#include "tests/support/multiprocess.h"

using namespace dtensor;
using namespace dtensor::testing;

namespace {

// What this rank's groups did, in order: "post" for a message of an operator
// (any tag below the library's), "agreed" when a receive of the agreement
// check had been waited for.
std::mutex g_log_mutex;
std::vector<std::string> g_log;
void log_event(const char* what) {
  std::lock_guard lock(g_log_mutex);
  g_log.emplace_back(what);
}
std::size_t first(const std::vector<std::string>& log, const std::string& what) {
  for (std::size_t i = 0; i < log.size(); ++i)
    if (log[i] == what) return i;
  return log.size();
}

class LoggedWait final : public Work {
 public:
  explicit LoggedWait(std::shared_ptr<Work> inner) : inner_(std::move(inner)) {}
  void wait(std::chrono::milliseconds timeout) override {
    inner_->wait(timeout);
    log_event("agreed");
  }

 private:
  std::shared_ptr<Work> inner_;
};

// A Gloo group that answers matches_by_tag as told and logs what it carries.
class LoggingGroup final : public ForwardingProcessGroup {
 public:
  LoggingGroup(std::shared_ptr<ProcessGroup> inner, bool by_tag)
      : ForwardingProcessGroup(std::move(inner)), by_tag_(by_tag) {}

  std::string backend_name() const override { return "logging-gloo"; }
  bool matches_by_tag(DeviceType) const override { return by_tag_; }

  std::shared_ptr<Work> isend(const Tensor& t, int dst, int tag) override {
    if (tag < kAgreementTag) log_event("post");
    return inner_->isend(t, dst, tag);
  }
  std::shared_ptr<Work> irecv(const Tensor& t, int src, int tag) override {
    if (tag < kAgreementTag) log_event("post");
    auto w = inner_->irecv(t, src, tag);
    if (tag == kAgreementTag) return std::make_shared<LoggedWait>(w);
    return w;
  }
  // One message at a time, through the two above, so that each is logged.
  std::vector<std::shared_ptr<Work>> batch_isend_irecv(const std::vector<P2POp>& ops) override {
    return ProcessGroup::batch_isend_irecv(ops);
  }
  std::shared_ptr<ProcessGroup> new_subgroup(const std::vector<int>& ranks) override {
    auto sub = inner_->new_subgroup(ranks);
    return sub ? std::make_shared<LoggingGroup>(sub, by_tag_) : nullptr;
  }

 private:
  bool by_tag_;
};

// One forward and one backward on 3 ranks over the logging group; returns
// this rank's log of the first call after the mesh is made.
void forward_and_backward_log(bool by_tag) {
  register_process_group_backend("logging-gloo", [by_tag](const BackendInit& init) {
    return std::make_shared<LoggingGroup>(gloo_backend::GlooProcessGroup::create_world(init),
                                          by_tag);
  });
  InitOptions options;
  options.backend = "logging-gloo";
  init_process_group(options);
  {
    REQUIRE(world()->matches_by_tag(DeviceType::CPU) == by_tag);
    DeviceMesh mesh(DeviceType::CPU, {3});
    auto x = distribute_tensor(Tensor::rand({1, 2, 4, 12}, DType::F64, 1), mesh, {Shard(3)});
    auto w = distribute_tensor(Tensor::rand({3, 2, 3, 3}, DType::F64, 2), mesh, {Replicate()});
    auto gy = distribute_tensor(Tensor::rand({1, 3, 4, 12}, DType::F64, 3), mesh, {Shard(3)});
    const ConvParams p{{1, 1}, {{1, 1}, {1, 1}}, {1, 1}, 1};
    for (const bool backward : {false, true}) {
      INFO((backward ? "backward" : "forward") << ", matches_by_tag " << by_tag);
      g_log.clear();
      if (backward)
        convolution_backward(gy, x, w, p, ConvOutputMask{true, true, false});
      else
        convolution(x, w, std::nullopt, p);
      const std::size_t post = first(g_log, "post"), agreed = first(g_log, "agreed");
      REQUIRE(post < g_log.size());
      REQUIRE(agreed < g_log.size());
      if (by_tag)
        CHECK(post < agreed);  // the check travels with the exchange
      else
        CHECK(agreed < post);  // confirmed before anything is posted
    }
    // Still exact against the oracle either way.
    ConvCase c;
    c.input = {1, 2, 4, 12};
    c.out_channels = 3;
    c.kernel = {3, 3};
    c.params = p;
    c.mesh = {3};
    c.input_placements = {Shard(3)};
    c.seed = 9;
    check_conv_case(c);
  }
  destroy_process_group();
}

}  // namespace

TEST_CASE("conv posts its exchange before confirming only where the group matches by tag P=3",
          "[conv][agreement][mp]") {
  RunOptions o;
  o.init_process_group = false;
  for (const bool by_tag : {true, false})
    run_ranks(
        3, [by_tag](RankContext&) { forward_and_backward_log(by_tag); }, o);
}
