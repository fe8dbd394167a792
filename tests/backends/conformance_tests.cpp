// The process-group conformance suite: the same test cases for every backend
// (Gloo under dtensor-run, MPI under mpirun; DTENSOR_CONFORMANCE_BACKEND names
// the one expected). Every collective and point-to-point operation against a
// naive oracle (the values each rank contributes are a formula of rank and
// index, so every rank computes every other's contribution in f64 loops),
// tags, messages to oneself, subgroups for mesh dims, the counters, and the
// contract's argument checks: InvalidArgument naming the parameter on every
// rank, nothing posted, the group still usable.
#include <fmt/format.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

#include "dtensor/core/config.h"
#include "dtensor/core/device_mesh.h"
#include "dtensor/core/distributed.h"
#include "dtensor/core/errors.h"

using namespace dtensor;
using Catch::Matchers::Contains;

namespace {

const DType kDTypes[] = {DType::F32, DType::F64, DType::BF16, DType::F16};
const ReduceOp kOps[] = {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min};

// Small integers (and their averages over 4 ranks) are exact in every dtype.
double value(int rank, std::int64_t i) {
  return static_cast<double>((rank + 1) * (i % 7 + 1) - 3 * (i % 3));
}

Tensor tensor_of(std::int64_t n, DType dtype, int rank, std::int64_t offset = 0) {
  Tensor t = Tensor::empty({n}, DType::F64);
  for (std::int64_t i = 0; i < n; ++i)
    t.data<double>()[i] = value(rank, offset + i);
  return t.to(dtype);
}

std::vector<double> values(const Tensor& t) {
  Tensor d = t.to(DType::F64);
  return std::vector<double>(d.data<double>(), d.data<double>() + d.numel());
}

double reduce_oracle(ReduceOp op, int size, std::int64_t i) {
  double acc = value(0, i);
  for (int r = 1; r < size; ++r) {
    const double v = value(r, i);
    acc = op == ReduceOp::Max ? std::max(acc, v) : op == ReduceOp::Min ? std::min(acc, v) : acc + v;
  }
  return op == ReduceOp::Avg ? acc / size : acc;
}

// Uneven counts with a zero: rank q gets q == 1 ? 0 : q + 2.
std::vector<std::int64_t> uneven_counts(int size) {
  std::vector<std::int64_t> c(static_cast<std::size_t>(size));
  for (int q = 0; q < size; ++q)
    c[q] = q == 1 ? 0 : q + 2;
  return c;
}

std::shared_ptr<ProcessGroup> pg() {
  return world();
}

// The backend under test: MPI under mpirun; the same suite runs under
// dtensor-run against Gloo (DTENSOR_CONFORMANCE_BACKEND=gloo), so that the
// backends are held to one contract.
std::string backend() {
  const char* b = std::getenv("DTENSOR_CONFORMANCE_BACKEND");
  return b ? b : "mpi";
}

}  // namespace

TEST_CASE("mpi launch: the world group is MPI's, started by mpirun alone",
          "[conformance][launch]") {
  auto g = pg();
  CHECK(g->backend_name() == "mpi");
  // mpirun's own variables name the launcher and the size.
  REQUIRE(config().mpi_launcher.has_value());
  REQUIRE(config().world_size.value.has_value());
  CHECK(g->size() == *config().world_size.value);
  CHECK(g->rank() == *config().rank.value);
  CHECK(g->matches_by_tag(DeviceType::CPU));
  std::vector<int> expect(static_cast<std::size_t>(g->size()));
  std::iota(expect.begin(), expect.end(), 0);
  CHECK(g->global_ranks() == expect);
}

TEST_CASE("conformance: allreduce every op and dtype equals the naive reduction", "[conformance]") {
  auto g = pg();
  for (DType dt : kDTypes)
    for (ReduceOp op : kOps)
      for (std::int64_t n : {0, 1, 1000}) {
        INFO(dtype_name(dt) << " " << reduce_op_name(op) << " n=" << n);
        Tensor t = tensor_of(n, dt, g->rank());
        g->allreduce(t, op);
        const auto got = values(t);
        for (std::int64_t i = 0; i < n; ++i)
          REQUIRE(got[i] == reduce_oracle(op, g->size(), i));
      }
}

TEST_CASE("conformance: broadcast from every root", "[conformance]") {
  auto g = pg();
  for (int root = 0; root < g->size(); ++root)
    for (DType dt : {DType::F64, DType::BF16}) {
      Tensor t = tensor_of(37, dt, g->rank());
      g->broadcast(t, root);
      REQUIRE(values(t) == values(tensor_of(37, dt, root)));
    }
}

TEST_CASE("conformance: allgather with uneven and zero counts, also in place", "[conformance]") {
  auto g = pg();
  const auto counts = uneven_counts(g->size());
  const std::int64_t total = std::accumulate(counts.begin(), counts.end(), std::int64_t{0});
  std::vector<double> expect;
  for (int q = 0; q < g->size(); ++q)
    for (std::int64_t i = 0; i < counts[q]; ++i)
      expect.push_back(value(q, i));
  for (DType dt : kDTypes) {
    Tensor in = tensor_of(counts[g->rank()], dt, g->rank());
    Tensor out = Tensor::empty({total}, dt);
    g->allgather(in, out, counts);
    REQUIRE(values(out) == expect);
  }
  // In place: the rank's part already sits at its place in out.
  Tensor out = Tensor::zeros({total}, DType::F64);
  std::int64_t offset = 0;
  for (int q = 0; q < g->rank(); ++q)
    offset += counts[q];
  Tensor mine = out.narrow(0, offset, counts[g->rank()]);
  mine.copy_(tensor_of(counts[g->rank()], DType::F64, g->rank()));
  g->allgather(mine, out, counts);
  REQUIRE(values(out) == expect);
}

TEST_CASE("conformance: reduce_scatter every op with uneven counts", "[conformance]") {
  auto g = pg();
  const auto counts = uneven_counts(g->size());
  const std::int64_t total = std::accumulate(counts.begin(), counts.end(), std::int64_t{0});
  std::int64_t offset = 0;
  for (int q = 0; q < g->rank(); ++q)
    offset += counts[q];
  for (DType dt : kDTypes)
    for (ReduceOp op : kOps) {
      INFO(dtype_name(dt) << " " << reduce_op_name(op));
      Tensor in = tensor_of(total, dt, g->rank());
      Tensor out = Tensor::empty({counts[g->rank()]}, dt);
      g->reduce_scatter(in, out, counts, op);
      const auto got = values(out);
      for (std::int64_t i = 0; i < counts[g->rank()]; ++i)
        REQUIRE(got[i] == reduce_oracle(op, g->size(), offset + i));
    }
}

TEST_CASE("conformance: all_to_all with counts that differ per pair", "[conformance]") {
  auto g = pg();
  const int P = g->size(), me = g->rank();
  // Rank r sends (r + q) % 3 elements to q, valued 1000 r + 10 q + i.
  auto count = [](int from, int to) { return static_cast<std::int64_t>((from + to) % 3); };
  std::vector<std::int64_t> sc(P), rc(P);
  std::vector<double> in_v, expect;
  for (int q = 0; q < P; ++q) {
    sc[q] = count(me, q);
    rc[q] = count(q, me);
    for (std::int64_t i = 0; i < sc[q]; ++i)
      in_v.push_back(1000.0 * me + 10.0 * q + i);
    for (std::int64_t i = 0; i < rc[q]; ++i)
      expect.push_back(1000.0 * q + 10.0 * me + i);
  }
  Tensor in = Tensor::empty({static_cast<std::int64_t>(in_v.size())}, DType::F64);
  std::copy(in_v.begin(), in_v.end(), in.data<double>());
  Tensor out = Tensor::empty({static_cast<std::int64_t>(expect.size())}, DType::F64);
  g->all_to_all(in, sc, out, rc);
  REQUIRE(values(out) == expect);
}

TEST_CASE("conformance: barrier", "[conformance]") {
  pg()->barrier();
  pg()->barrier();
}

TEST_CASE("conformance: point to point ring, tags keep messages apart, self messages",
          "[conformance]") {
  auto g = pg();
  const int P = g->size(), me = g->rank();
  const int next = (me + 1) % P, prev = (me + P - 1) % P;
  // Two messages to the same peer with different tags, received in the
  // opposite order: the group matches by tag, not by order. One tag is above 2^30,
  // as the dispatcher's call-scoped tags are.
  const int tags[] = {3, (1 << 30) + 5};
  Tensor a = tensor_of(10, DType::F32, me, 0), b = tensor_of(20, DType::F32, me, 100);
  Tensor ra = Tensor::empty({10}, DType::F32), rb = Tensor::empty({20}, DType::F32);
  auto wb = g->irecv(rb, prev, tags[1]);
  auto wa = g->irecv(ra, prev, tags[0]);
  auto sa = g->isend(a, next, tags[0]);
  auto sb = g->isend(b, next, tags[1]);
  std::vector<std::shared_ptr<Work>> all{wa, wb, sa, sb};
  wait_all(all);
  REQUIRE(values(ra) == values(tensor_of(10, DType::F32, prev, 0)));
  REQUIRE(values(rb) == values(tensor_of(20, DType::F32, prev, 100)));
  // To itself.
  Tensor self_in = tensor_of(5, DType::F64, me), self_out = Tensor::empty({5}, DType::F64);
  auto r = g->irecv(self_out, me, 9);
  g->isend(self_in, me, 9)->wait();
  r->wait();
  REQUIRE(values(self_out) == values(self_in));
}

TEST_CASE("conformance: batch_isend_irecv exchanges with both neighbours", "[conformance]") {
  auto g = pg();
  const int P = g->size(), me = g->rank();
  const int next = (me + 1) % P, prev = (me + P - 1) % P;
  Tensor to_next = tensor_of(8, DType::F64, me, 1), to_prev = tensor_of(8, DType::F64, me, 2);
  Tensor from_prev = Tensor::empty({8}, DType::F64), from_next = Tensor::empty({8}, DType::F64);
  auto works =
      g->batch_isend_irecv({P2POp::send(to_next, next, 1), P2POp::send(to_prev, prev, 2),
                            P2POp::recv(from_prev, prev, 1), P2POp::recv(from_next, next, 2)});
  wait_all(works);
  REQUIRE(values(from_prev) == values(tensor_of(8, DType::F64, prev, 1)));
  REQUIRE(values(from_next) == values(tensor_of(8, DType::F64, next, 2)));
}

TEST_CASE("conformance: counters count the bytes a rank sends and receives point to point",
          "[conformance]") {
  auto g = pg();
  const int P = g->size(), me = g->rank();
  const auto sent0 = g->counters().bytes_sent.load();
  const auto recv0 = g->counters().bytes_received.load();
  Tensor out = tensor_of(16, DType::F64, me), in = Tensor::empty({16}, DType::F64);
  auto works = g->batch_isend_irecv(
      {P2POp::send(out, (me + 1) % P, 4), P2POp::recv(in, (me + P - 1) % P, 4)});
  wait_all(works);
  CHECK(g->counters().bytes_sent.load() - sent0 == 16 * 8);
  CHECK(g->counters().bytes_received.load() - recv0 == 16 * 8);
}

TEST_CASE("conformance: subgroups from new_subgroup and split_groups, and a 2x2 mesh's dims",
          "[conformance]") {
  auto g = pg();
  REQUIRE(g->size() == 4);
  const int me = g->rank();
  // Even and odd ranks: only the members call new_subgroup.
  const std::vector<int> members = me % 2 == 0 ? std::vector<int>{0, 2} : std::vector<int>{1, 3};
  auto sub = g->new_subgroup(members);
  REQUIRE(sub->size() == 2);
  CHECK(sub->rank() == me / 2);
  CHECK(sub->global_ranks() == members);
  Tensor t = Tensor::full({3}, me, DType::F64);
  sub->allreduce(t);
  CHECK(values(t) == std::vector<double>(3, members[0] + members[1]));
  // Point to point inside the subgroup uses its ranks.
  Tensor x = Tensor::full({2}, me, DType::F64), y = Tensor::empty({2}, DType::F64);
  auto w = sub->batch_isend_irecv(
      {P2POp::send(x, 1 - sub->rank(), 7), P2POp::recv(y, 1 - sub->rank(), 7)});
  wait_all(w);
  CHECK(values(y) == std::vector<double>(2, members[1 - sub->rank()]));
  // split_groups: {0,1}, {2}; rank 3 in none.
  auto part = g->split_groups({{0, 1}, {2}});
  if (me == 3) {
    CHECK(part == nullptr);
  } else {
    REQUIRE(part != nullptr);
    CHECK(part->size() == (me < 2 ? 2 : 1));
    Tensor s = Tensor::full({1}, me + 1, DType::F64);
    part->allreduce(s);
    CHECK(values(s)[0] == (me < 2 ? 3.0 : 3.0));
  }
  // A 2x2 mesh: each dim's group reduces over the right ranks.
  DeviceMesh mesh(DeviceType::CPU, {2, 2});
  for (int dim = 0; dim < 2; ++dim) {
    auto dg = mesh.get_group(dim);
    REQUIRE(dg->size() == 2);
    Tensor v = Tensor::full({1}, me, DType::F64);
    dg->allreduce(v);
    const int other = dim == 0 ? me ^ 2 : me ^ 1;
    CHECK(values(v)[0] == me + other);
    CHECK(dg->backend_name() == backend());
  }
}

TEST_CASE("conformance: bad arguments raise InvalidArgument naming them on every rank",
          "[conformance][errors]") {
  auto g = pg();
  const int P = g->size();
  Tensor t = Tensor::zeros({4}, DType::F32);
  CHECK_THROWS_MATCHES(
      g->isend(t, P, 0), InvalidArgument,
      Catch::Matchers::Message(fmt::format(
          "[dtensor.{}] isend: dst={} is outside the group of {} ranks", backend(), P, P)));
  CHECK_THROWS_WITH(g->irecv(t, -1, 0),
                    Contains("src=-1") && Contains("[dtensor." + backend() + "]"));
  CHECK_THROWS_WITH(g->isend(t, 0, -2), Contains("tag=-2 must be >= 0"));
  CHECK_THROWS_WITH(g->broadcast(t, P), Contains("root="));
  Tensor out = Tensor::zeros({4}, DType::F32);
  CHECK_THROWS_WITH(g->allgather(t, out, {1}), Contains("counts has 1 entries"));
  Tensor wide = Tensor::zeros({4 * P}, DType::F64);
  CHECK_THROWS_WITH(g->allgather(t, wide, std::vector<std::int64_t>(P, 4)),
                    Contains("allgather: out is f64 but in is f32"));
  CHECK_THROWS_WITH(g->reduce_scatter(t, out, std::vector<std::int64_t>(P, -1)),
                    Contains("is negative"));
  std::vector<std::int64_t> ones(P, 1);
  CHECK_THROWS_WITH(g->all_to_all(t, ones, t, ones),
                    Contains("in has 4 elements") || Contains("must not share storage"));
  Tensor strided = Tensor::zeros({4, 4}, DType::F32).narrow(1, 0, 2);
  CHECK_THROWS_WITH(g->allreduce(strided), Contains("must be contiguous"));
  CHECK_THROWS_WITH(g->new_subgroup({}), Contains("ranks is empty"));
  CHECK_THROWS_WITH(g->new_subgroup({1, 0}), Contains("strictly increasing"));
  CHECK_THROWS_WITH(g->split_groups({{0, 0}}), Contains("groups"));
  // More of the contract, each naming its parameter.
  Tensor undefined;
  CHECK_THROWS_MATCHES(g->allreduce(undefined), InvalidArgument,
                       Catch::Matchers::Message(fmt::format(
                           "[dtensor.{}] allreduce: t is an undefined tensor", backend())));
  CHECK_THROWS_WITH(g->broadcast(t, -1), Contains("broadcast: root=-1 is outside the group"));
  Tensor wide_f32 = wide.to(DType::F32);
  CHECK_THROWS_WITH(
      g->allgather(t, wide_f32, std::vector<std::int64_t>(P, 3)),
      Contains(fmt::format("allgather: in has 4 elements but counts[{}]=3", g->rank())));
  Tensor three = Tensor::zeros({3}, DType::F32);
  CHECK_THROWS_WITH(
      g->reduce_scatter(wide_f32, three, std::vector<std::int64_t>(P, 4)),
      Contains(fmt::format("reduce_scatter: out has 3 elements but counts[{}]=4", g->rank())));
  std::vector<std::int64_t> send(P, 1), recv(P, 1);
  recv[static_cast<std::size_t>(g->rank())] = 2;
  Tensor a2a_in = Tensor::zeros({P}, DType::F32), a2a_out = Tensor::zeros({P + 1}, DType::F32);
  CHECK_THROWS_WITH(g->all_to_all(a2a_in, send, a2a_out, recv),
                    Contains("(what a rank sends itself)"));
  CHECK_THROWS_WITH(g->all_to_all(a2a_in, std::vector<std::int64_t>(P + 1, 0), a2a_out, recv),
                    Contains("send_counts has"));
  CHECK_THROWS_WITH(g->new_subgroup({0, P}), Contains(fmt::format("ranks[1]={} is outside", P)));
  const int other = (g->rank() + 1) % P;
  CHECK_THROWS_WITH(g->new_subgroup({other}), Contains("only the members call new_subgroup"));
  // The group still works: nothing above reached the backend.
  Tensor ok = Tensor::full({1}, 1, DType::F64);
  g->allreduce(ok);
  CHECK(values(ok)[0] == P);
}

TEST_CASE("conformance: messages to oneself, alone and inside batches, match by tag in order",
          "[conformance]") {
  auto g = pg();
  const int P = g->size(), me = g->rank();
  const int next = (me + 1) % P, prev = (me + P - 1) % P;
  // A batch mixing a ring exchange with two messages to oneself on two tags;
  // the receives listed before their sends.
  Tensor ring_out = tensor_of(6, DType::F64, me, 7), ring_in = Tensor::empty({6}, DType::F64);
  Tensor s1 = tensor_of(3, DType::F32, me, 1), s2 = tensor_of(5, DType::F32, me, 2);
  Tensor r1 = Tensor::empty({3}, DType::F32), r2 = Tensor::empty({5}, DType::F32);
  auto works = g->batch_isend_irecv({P2POp::recv(r2, me, 12), P2POp::recv(ring_in, prev, 11),
                                     P2POp::recv(r1, me, 11), P2POp::send(s1, me, 11),
                                     P2POp::send(ring_out, next, 11), P2POp::send(s2, me, 12)});
  REQUIRE(works.size() == 6);
  wait_all(works);
  CHECK(values(r1) == values(s1));
  CHECK(values(r2) == values(s2));
  CHECK(values(ring_in) == values(tensor_of(6, DType::F64, prev, 7)));
  // Two sends on one tag arrive in the order posted.
  Tensor first = Tensor::full({2}, 1.0, DType::F64), second = Tensor::full({2}, 2.0, DType::F64);
  auto w1 = g->isend(first, me, 40), w2 = g->isend(second, me, 40);
  Tensor got1 = Tensor::empty({2}, DType::F64), got2 = Tensor::empty({2}, DType::F64);
  g->irecv(got1, me, 40)->wait();
  g->irecv(got2, me, 40)->wait();
  w1->wait();
  w2->wait();
  CHECK(values(got1) == std::vector<double>{1, 1});
  CHECK(values(got2) == std::vector<double>{2, 2});
}

TEST_CASE("conformance: a batch with one bad entry posts none of it", "[conformance][errors]") {
  auto g = pg();
  const int P = g->size(), me = g->rank();
  const int next = (me + 1) % P, prev = (me + P - 1) % P;
  // Had the receive below been posted, it would take the message meant for
  // the receive after it, and that one would never complete.
  Tensor stale = Tensor::zeros({4}, DType::F64), payload = tensor_of(4, DType::F64, me, 3);
  CHECK_THROWS_WITH(
      g->batch_isend_irecv({P2POp::recv(stale, prev, 21), P2POp::send(payload, P, 21)}),
      Contains(fmt::format("batch_isend_irecv: dst={} is outside the group", P)));
  Tensor strided = Tensor::zeros({4, 2}, DType::F64).narrow(1, 0, 1);
  CHECK_THROWS_WITH(
      g->batch_isend_irecv({P2POp::recv(stale, prev, 21), P2POp::send(strided, next, 21)}),
      Contains("must be contiguous"));
  Tensor fresh = Tensor::zeros({4}, DType::F64);
  auto works = g->batch_isend_irecv({P2POp::recv(fresh, prev, 21), P2POp::send(payload, next, 21)});
  wait_all(works, std::chrono::milliseconds(20000));
  CHECK(values(fresh) == values(tensor_of(4, DType::F64, prev, 3)));
  CHECK(values(stale) == std::vector<double>(4, 0.0));
}
