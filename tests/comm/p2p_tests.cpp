// Point-to-point transfers of the Gloo process group, run on real processes.
#include <catch2/catch.hpp>

#include "tests/comm/comm_test_util.h"
#include "tests/support/multiprocess.h"

using namespace dtensor;
using namespace dtensor::testing;

namespace {

// Halo pattern sizes: rank r sends left_count(r) elements to r-1 and
// right_count(r) to r+1 — all different, so a mix-up shows.
std::int64_t left_count(int r) {
  return 100 + 10 * r;
}
std::int64_t right_count(int r) {
  return 50 + 7 * r;
}
// Element i of the message from `src` to `dst`.
double message_value(int src, int dst, std::int64_t i) {
  return src * 100000.0 + dst * 10000.0 + i;
}

constexpr int kTagRightward = 1, kTagLeftward = 2;

}  // namespace

TEST_CASE("p2p halo exchange with both neighbours at once, no wrap, P=1..4", "[comm][p2p]") {
  for (int P = 1; P <= 4; ++P) {
    run_ranks(P, [](RankContext& ctx) {
      const int r = ctx.rank, P = ctx.world_size;
      auto& pg = *ctx.pg;
      const bool has_left = r > 0, has_right = r + 1 < P;
      Tensor to_left, to_right, from_left, from_right;
      std::vector<P2POp> ops;
      // Sends listed first on purpose: the batch must still post receives first.
      if (has_left) {
        to_left = make_tensor(DType::F32, left_count(r),
                              [&](auto i) { return message_value(r, r - 1, i); });
        ops.push_back(P2POp::send(to_left, r - 1, kTagLeftward));
      }
      if (has_right) {
        to_right = make_tensor(DType::F32, right_count(r),
                               [&](auto i) { return message_value(r, r + 1, i); });
        ops.push_back(P2POp::send(to_right, r + 1, kTagRightward));
      }
      if (has_left) {
        from_left = Tensor::zeros({right_count(r - 1)}, DType::F32);
        ops.push_back(P2POp::recv(from_left, r - 1, kTagRightward));
      }
      if (has_right) {
        from_right = Tensor::zeros({left_count(r + 1)}, DType::F32);
        ops.push_back(P2POp::recv(from_right, r + 1, kTagLeftward));
      }
      auto works = pg.batch_isend_irecv(ops);
      wait_all(works);
      if (has_left)
        CHECK(max_error(from_left, [&](auto i) { return message_value(r - 1, r, i); }) == 0);
      if (has_right)
        CHECK(max_error(from_right, [&](auto i) { return message_value(r + 1, r, i); }) == 0);
    });
  }
}

TEST_CASE("p2p byte counters are exact for the halo pattern P=2..4", "[comm][p2p][counters]") {
  for (int P = 2; P <= 4; ++P) {
    run_ranks(P, [](RankContext& ctx) {
      const int r = ctx.rank, P = ctx.world_size;
      auto& pg = *ctx.pg;
      const auto before = CounterSnapshot::of(pg);
      std::vector<P2POp> ops;
      std::vector<Tensor> keep;
      std::uint64_t want_sent = 0, want_recv = 0, want_msgs = 0;
      if (r > 0) {
        keep.push_back(Tensor::zeros({right_count(r - 1)}, DType::F64));
        ops.push_back(P2POp::recv(keep.back(), r - 1, kTagRightward));
        keep.push_back(Tensor::zeros({left_count(r)}, DType::F64));
        ops.push_back(P2POp::send(keep.back(), r - 1, kTagLeftward));
        want_recv += 8 * right_count(r - 1);
        want_sent += 8 * left_count(r);
        want_msgs += 1;
      }
      if (r + 1 < P) {
        keep.push_back(Tensor::zeros({left_count(r + 1)}, DType::F64));
        ops.push_back(P2POp::recv(keep.back(), r + 1, kTagLeftward));
        keep.push_back(Tensor::zeros({right_count(r)}, DType::F64));
        ops.push_back(P2POp::send(keep.back(), r + 1, kTagRightward));
        want_recv += 8 * left_count(r + 1);
        want_sent += 8 * right_count(r);
        want_msgs += 1;
      }
      auto works = pg.batch_isend_irecv(ops);
      wait_all(works);
      const auto d = CounterSnapshot::of(pg) - before;
      CHECK(d.sent == want_sent);
      CHECK(d.received == want_recv);
      CHECK(d.messages == want_msgs);
    });
  }
}

TEST_CASE("p2p two messages to the same peer kept apart by tag P=2", "[comm][p2p]") {
  // With two ranks, "left" and "right" are the same peer: tags must keep the
  // two halos apart whatever order they are posted in.
  run_ranks(2, [](RankContext& ctx) {
    const int r = ctx.rank, peer = 1 - r;
    auto& pg = *ctx.pg;
    Tensor a = make_tensor(DType::F64, 33, [&](auto i) { return message_value(r, peer, i); });
    Tensor b = make_tensor(DType::F64, 7, [&](auto i) { return -message_value(r, peer, i); });
    Tensor ra = Tensor::zeros({33}, DType::F64), rb = Tensor::zeros({7}, DType::F64);
    // Rank 0 posts tag 1 first, rank 1 tag 2 first.
    std::vector<std::shared_ptr<Work>> w;
    if (r == 0) {
      w.push_back(pg.irecv(ra, peer, 1));
      w.push_back(pg.irecv(rb, peer, 2));
      w.push_back(pg.isend(a, peer, 1));
      w.push_back(pg.isend(b, peer, 2));
    } else {
      w.push_back(pg.isend(b, peer, 2));
      w.push_back(pg.irecv(rb, peer, 2));
      w.push_back(pg.isend(a, peer, 1));
      w.push_back(pg.irecv(ra, peer, 1));
    }
    wait_all(w);
    CHECK(max_error(ra, [&](auto i) { return message_value(peer, r, i); }) == 0);
    CHECK(max_error(rb, [&](auto i) { return -message_value(peer, r, i); }) == 0);
  });
}

TEST_CASE("p2p messages with one tag arrive in posting order P=2", "[comm][p2p]") {
  run_ranks(2, [](RankContext& ctx) {
    auto& pg = *ctx.pg;
    constexpr int kCount = 5;
    std::vector<Tensor> bufs;
    std::vector<std::shared_ptr<Work>> w;
    for (int k = 0; k < kCount; ++k) {
      if (ctx.rank == 0) {
        bufs.push_back(Tensor::full({k + 1}, 10.0 * k, DType::F32));
        w.push_back(pg.isend(bufs.back(), 1, 9));
      } else {
        bufs.push_back(Tensor::zeros({k + 1}, DType::F32));
        w.push_back(pg.irecv(bufs.back(), 0, 9));
      }
    }
    wait_all(w);
    if (ctx.rank == 1)
      for (int k = 0; k < kCount; ++k)
        CHECK(max_error(bufs[k], [&](auto) { return 10.0 * k; }) == 0);
  });
}

TEST_CASE("p2p to its own rank is a local copy that sends nothing P=2", "[comm][p2p]") {
  run_ranks(2, [](RankContext& ctx) {
    const int r = ctx.rank;
    auto& pg = *ctx.pg;
    const auto before = CounterSnapshot::of(pg);
    Tensor out = make_tensor(DType::BF16, 17, [&](auto i) { return small_value(r, i); });
    Tensor in = Tensor::zeros({17}, DType::BF16);
    // The send is posted before its receive: it waits in the mailbox.
    auto ws = pg.isend(out, r, 4);
    auto wr = pg.irecv(in, r, 4);
    ws->wait();
    wr->wait();
    CHECK(max_error(in, [&](auto i) { return small_value(r, i); }) == 0);
    const auto d = CounterSnapshot::of(pg) - before;
    CHECK(d.sent == 0);
    CHECK(d.received == 0);
    CHECK(d.messages == 0);
    // A receive whose send never comes times out instead of hanging.
    Tensor lonely = Tensor::zeros({1}, DType::F32);
    auto w = pg.irecv(lonely, r, 5);
    const auto t0 = std::chrono::steady_clock::now();
    REQUIRE_THROWS_AS(w->wait(std::chrono::milliseconds(200)), TimeoutError);
    CHECK(seconds_since(t0) < 2.0);
  });
}

TEST_CASE("p2p on a one-rank group touches no network P=1", "[comm][p2p]") {
  run_ranks(1, [](RankContext& ctx) {
    auto& pg = *ctx.pg;
    Tensor a = make_tensor(DType::F32, 9, [](auto i) { return 1.5 * i; });
    Tensor b = Tensor::zeros({9}, DType::F32);
    auto works = pg.batch_isend_irecv({P2POp::send(a, 0, 0), P2POp::recv(b, 0, 0)});
    wait_all(works);
    CHECK(max_error(b, [](auto i) { return 1.5 * i; }) == 0);
    CHECK(pg.counters().bytes_sent == 0);
    CHECK(pg.counters().messages_sent == 0);
  });
}

TEST_CASE("p2p empty and 16 MiB messages P=2", "[comm][p2p]") {
  run_ranks(2, [](RankContext& ctx) {
    auto& pg = *ctx.pg;
    const std::int64_t big = 4 << 20;  // f32 elements: 16 MiB
    const int peer = 1 - ctx.rank;
    Tensor send_empty = Tensor::zeros({0}, DType::F32), recv_empty = Tensor::zeros({0}, DType::F32);
    Tensor send_big = make_tensor(DType::F32, big, [&](auto i) { return (i % 4096) + ctx.rank; });
    Tensor recv_big = Tensor::zeros({big}, DType::F32);
    const auto before = CounterSnapshot::of(pg);
    auto works =
        pg.batch_isend_irecv({P2POp::send(send_empty, peer, 0), P2POp::recv(recv_empty, peer, 0),
                              P2POp::send(send_big, peer, 1), P2POp::recv(recv_big, peer, 1)});
    wait_all(works);
    CHECK(max_error(recv_big, [&](auto i) { return (i % 4096) + peer; }) == 0);
    const auto d = CounterSnapshot::of(pg) - before;
    CHECK(d.sent == 4u * big);
    CHECK(d.received == 4u * big);
    CHECK(d.messages == 2);  // the empty message is a message too
  });
}

TEST_CASE("p2p rejects bad arguments naming the parameter P=2", "[comm][p2p][validation]") {
  run_ranks(2, [](RankContext& ctx) {
    auto& pg = *ctx.pg;
    Tensor t = Tensor::zeros({4}, DType::F32);
    auto message_of = [](auto&& fn) {
      try {
        fn();
      } catch (const InvalidArgument& e) {
        return std::string(e.what());
      }
      return std::string("(no InvalidArgument)");
    };
    CHECK_THAT(message_of([&] { pg.isend(t, 2); }), Catch::Contains("dst=2"));
    CHECK_THAT(message_of([&] { pg.irecv(t, -1); }), Catch::Contains("src=-1"));
    CHECK_THAT(message_of([&] { pg.isend(t, 1 - ctx.rank, -3); }), Catch::Contains("tag=-3"));
    Tensor strided = Tensor::zeros({4, 4}, DType::F32).narrow(1, 0, 2);
    CHECK_THAT(message_of([&] { pg.isend(strided, 1 - ctx.rank); }), Catch::Contains("contiguous"));
    CHECK_THAT(message_of([&] { pg.irecv(Tensor(), 1 - ctx.rank); }), Catch::Contains("undefined"));
    CHECK_THAT(message_of([&] { pg.isend(t, 2); }), Catch::StartsWith("[dtensor.gloo]"));
    // Rejected calls leave the group usable.
    Tensor x = Tensor::full({3}, 1.0, DType::F32);
    pg.allreduce(x);
    CHECK(max_error(x, [](auto) { return 2.0; }) == 0);
  });
}

TEST_CASE("p2p repeated exchanges on the same tensors see fresh data each step P=3",
          "[comm][p2p]") {
  // A halo loop reuses its buffers every step (the backend then reuses its
  // transport buffers too): each step must deliver that step's values.
  run_ranks(3, [](RankContext& ctx) {
    const int r = ctx.rank, P = ctx.world_size;
    auto& pg = *ctx.pg;
    std::vector<int> peers;
    if (r > 0) peers.push_back(r - 1);
    if (r + 1 < P) peers.push_back(r + 1);
    std::vector<Tensor> out, in;
    for (std::size_t k = 0; k < peers.size(); ++k) {
      out.push_back(Tensor::zeros({257}, DType::F32));
      in.push_back(Tensor::zeros({257}, DType::F32));
    }
    for (int step = 0; step < 6; ++step) {
      std::vector<P2POp> ops;
      for (std::size_t k = 0; k < peers.size(); ++k) {
        out[k].fill_(1000.0 * step + 10.0 * r + peers[k]);
        ops.push_back(P2POp::recv(in[k], peers[k]));
        ops.push_back(P2POp::send(out[k], peers[k]));
      }
      auto works = pg.batch_isend_irecv(ops);
      wait_all(works);
      for (std::size_t k = 0; k < peers.size(); ++k)
        CHECK(max_error(in[k], [&](auto) { return 1000.0 * step + 10.0 * peers[k] + r; }) == 0);
    }
  });
}

TEST_CASE("p2p a dropped, never-waited receive does not break the group P=2", "[comm][p2p]") {
  run_ranks(2, [](RankContext& ctx) {
    auto& pg = *ctx.pg;
    if (ctx.rank == 0) {
      pg.irecv(Tensor::zeros({1000}, DType::F32), 1, 7);  // handle dropped at once
    } else {
      pg.isend(Tensor::full({1000}, 3.0, DType::F32), 0, 7)->wait();
    }
    Tensor t = Tensor::full({4}, 1.0, DType::F64);
    pg.allreduce(t);
    CHECK(max_error(t, [](auto) { return 2.0; }) == 0);
  });
}
