// Point-to-point messages between ranks on one host go through shared memory
// (backends/gloo/shm_channel.h): Gloo's semantics (matching by tag in the
// order posted, any size, any arrival order), and its failure behaviour (a
// peer that went or failed is named, a silent one times out).
#include <chrono>
#include <cstdint>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "backends/gloo/shm_channel.h"
#include "backends/gloo/shm_ring.h"
#include "tests/comm/comm_test_util.h"
#include "tests/support/multiprocess.h"

using namespace dtensor;
using namespace dtensor::testing;
using namespace std::chrono_literals;

namespace {

// How many shared-memory segments of the library this process has mapped
// (their names are removed once both ranks mapped them: "(deleted)").
int mapped_segments() {
  std::ifstream maps("/proc/self/maps");
  int n = 0;
  for (std::string line; std::getline(maps, line);)
    if (line.find("/dev/shm/dtensor-") != std::string::npos) ++n;
  return n;
}

double value(int src, int tag, std::int64_t i) {
  return src * 1e6 + tag * 1e4 + (i % 9973);
}

}  // namespace

TEST_CASE("a shared-memory ring carries a byte stream whole, across its wrap, between two threads",
          "[comm][shm]") {
  // Byte k of the stream is a hash of k: the reader checks every one. The
  // capacity is odd so that writes and reads straddle the wrap at every offset.
  constexpr std::uint64_t kCapacity = 4099, kTotal = 3'000'000;
  const auto byte_at = [](std::uint64_t k) { return static_cast<char>((k * 2654435761u) >> 13); };
  gloo_backend::shm::RingCounters counters;
  std::vector<char> data(kCapacity);
  gloo_backend::shm::Ring writer(&counters, data.data(), kCapacity);
  gloo_backend::shm::Ring reader(&counters, data.data(), kCapacity);
  std::thread produce([&] {
    std::mt19937_64 rng(1);
    std::vector<char> chunk;
    for (std::uint64_t k = 0; k < kTotal;) {
      chunk.resize(std::min<std::uint64_t>(rng() % 9000, kTotal - k));
      for (std::size_t i = 0; i < chunk.size(); ++i)
        chunk[i] = byte_at(k + i);
      for (std::uint64_t done = 0; done < chunk.size();) {
        done += writer.write(chunk.data() + done, chunk.size() - done);
        std::this_thread::yield();
      }
      k += chunk.size();
    }
  });
  std::mt19937_64 rng(2);
  std::vector<char> got(9000);
  std::uint64_t k = 0, wrong = 0;
  while (k < kTotal) {
    const std::uint64_t n = std::min<std::uint64_t>(reader.readable(), rng() % 9000);
    if (n == 0) {
      std::this_thread::yield();
      continue;
    }
    if (rng() % 4 == 0) {  // a peek shows the same bytes the read then takes
      reader.peek(got.data(), n);
      for (std::uint64_t i = 0; i < n; ++i)
        wrong += got[i] != byte_at(k + i);
    }
    reader.read(got.data(), n);
    for (std::uint64_t i = 0; i < n; ++i)
      wrong += got[i] != byte_at(k + i);
    k += n;
  }
  produce.join();
  CHECK(wrong == 0);
  CHECK(reader.readable() == 0);
  CHECK(writer.has_room(kCapacity));
}

TEST_CASE(
    "shared-memory rings: 1 MiB up to 16 peers on a host, then within 32 MiB a rank, "
    "never under 64 KiB",
    "[comm][shm]") {
  using gloo_backend::ShmChannel;
  for (std::size_t peers : {1, 2, 15, 16})
    CHECK(ShmChannel::ring_bytes(peers) == (1u << 20));
  CHECK(ShmChannel::ring_bytes(17) == (512u << 10));
  CHECK(ShmChannel::ring_bytes(32) == (512u << 10));
  CHECK(ShmChannel::ring_bytes(63) == (256u << 10));
  CHECK(ShmChannel::ring_bytes(255) == (64u << 10));
  CHECK(ShmChannel::ring_bytes(10000) == (64u << 10));
}

TEST_CASE(
    "ranks on one host exchange through shared memory, and over TCP with DTENSOR_GLOO_SHM=off P=2",
    "[comm][p2p][shm][mp]") {
  for (const char* setting : {"on", "off"}) {
    RunOptions o;
    o.env.emplace("DTENSOR_GLOO_SHM", setting);
    run_ranks(
        2,
        [on = std::string(setting) == "on"](RankContext& ctx) {
          auto& pg = *ctx.pg;
          const int peer = 1 - ctx.rank;
          Tensor out = make_tensor(DType::F32, 1000, [&](auto i) { return value(ctx.rank, 4, i); });
          Tensor in = Tensor::zeros({1000}, DType::F32);
          auto r = pg.irecv(in, peer, 4);
          auto s = pg.isend(out, peer, 4);
          r->wait();
          s->wait();
          CHECK(max_error(in, [&](auto i) { return value(peer, 4, i); }) == 0);
          CHECK(mapped_segments() == (on ? 1 : 0));
          // The halo chains' cost model prices a message by the transport.
          CHECK(pg.message_seconds() == Approx(on ? 5e-6 : 40e-6));
        },
        o);
  }
}

TEST_CASE(
    "shared-memory messages match by tag in the order posted, whatever their size or order "
    "of arrival P=2",
    "[comm][p2p][shm][mp]") {
  // Rank 0 sends five messages, one of them larger than a ring (1 MiB), all
  // before rank 1 posts a receive; rank 1 posts them in another order.
  struct Message {
    int tag;
    std::int64_t n;
    DType dt;
  };
  const std::vector<Message> sent = {{5, 0, DType::F32},
                                     {7, (3 << 18) + 3, DType::F32},
                                     {5, 100, DType::F32},
                                     {9, 1000, DType::F64},
                                     {7, 17, DType::F32}};
  run_ranks(2, [&](RankContext& ctx) {
    auto& pg = *ctx.pg;
    std::vector<Tensor> keep;
    std::vector<std::shared_ptr<Work>> works;
    if (ctx.rank == 0) {
      for (std::size_t k = 0; k < sent.size(); ++k) {
        keep.push_back(make_tensor(sent[k].dt, sent[k].n,
                                   [&](auto i) { return value(0, static_cast<int>(k), i); }));
        works.push_back(pg.isend(keep.back(), 1, sent[k].tag));
      }
      wait_all(works);
      pg.barrier();
      return;
    }
    std::this_thread::sleep_for(300ms);  // everything that fits has arrived
    const std::vector<std::size_t> order = {3, 1, 0, 4, 2};
    for (std::size_t k : order) {
      keep.push_back(Tensor::full({sent[k].n}, -1.0, sent[k].dt));
      works.push_back(pg.irecv(keep.back(), 0, sent[k].tag));
    }
    wait_all(works);
    for (std::size_t j = 0; j < order.size(); ++j) {
      const std::size_t k = order[j];
      INFO("message " << k << " (tag " << sent[k].tag << ", " << sent[k].n << " elements)");
      CHECK(max_error(keep[j], [&](auto i) { return value(0, static_cast<int>(k), i); }) == 0);
    }
    pg.barrier();
  });
}

TEST_CASE("both ranks send more than a ring holds, and wait for it, before either receives P=2",
          "[comm][p2p][shm][mp]") {
  // Each send can finish only once the peer read some of it, and neither has
  // posted its receive: a waiting rank must take what arrived aside.
  run_ranks(2, [](RankContext& ctx) {
    auto& pg = *ctx.pg;
    const int peer = 1 - ctx.rank;
    const std::int64_t n = 3 << 19;  // 6 MiB of f32
    Tensor out = make_tensor(DType::F32, n, [&](auto i) { return value(ctx.rank, 1, i); });
    pg.isend(out, peer, 1)->wait();
    Tensor in = Tensor::zeros({n}, DType::F32);
    pg.irecv(in, peer, 1)->wait();
    CHECK(max_error(in, [&](auto i) { return value(peer, 1, i); }) == 0);
  });
}

TEST_CASE("a shared-memory receive of the wrong size fails naming both sizes P=2",
          "[comm][p2p][shm][errors][mp]") {
  RunOptions o;
  o.comm_timeout = 10s;
  run_ranks(
      2,
      [](RankContext& ctx) {
        auto& pg = *ctx.pg;
        if (ctx.rank == 0) {
          pg.isend(Tensor::zeros({10}, DType::F32), 1, 3)->wait();
          return;
        }
        Tensor in = Tensor::zeros({12}, DType::F32);
        try {
          pg.irecv(in, 0, 3)->wait();
          FAIL("a receive of 48 bytes took a message of 40");
        } catch (const CommError& e) {
          CHECK_THAT(std::string(e.what()), Catch::Contains("recv from rank 0 tag 3") &&
                                                Catch::Contains("expected 48 bytes") &&
                                                Catch::Contains("has 40"));
        }
      },
      o);
}

TEST_CASE("a rank whose group failed ends its peer's shared-memory wait at once P=2",
          "[comm][p2p][shm][fault][mp]") {
  // Rank 1's receive times out (300 ms), which breaks its group; rank 0,
  // waiting on a receive from rank 1 with a long timeout, must hear of it
  // within a second, while rank 1 lives on. Two paths carry it: the mark
  // rank 1's group leaves in the segment, and the fault monitor's abort key
  // (polled every 100 ms; with the mark removed the test still passes by
  // it). Without both, rank 0 would wait out its 60 s.
  RunOptions o;
  o.comm_timeout = 60s;
  o.deadline = 90s;
  o.env.emplace("DTENSOR_HEARTBEAT_INTERVAL", "20");
  o.env.emplace("DTENSOR_HEARTBEAT_TIMEOUT", "50");
  run_ranks(
      2,
      [](RankContext& ctx) {
        auto& pg = *ctx.pg;
        Tensor t = Tensor::zeros({16}, DType::F32);
        const auto t0 = std::chrono::steady_clock::now();
        if (ctx.rank == 1) {
          CHECK_THROWS_AS(pg.irecv(t, 0, 8)->wait(300ms), TimeoutError);
          std::this_thread::sleep_for(3s);  // alive, its group still there
          return;
        }
        try {
          pg.irecv(t, 1, 9)->wait();
          FAIL("a receive from a rank whose group failed returned");
        } catch (const CommError& e) {
          CHECK_THAT(std::string(e.what()),
                     Catch::Contains("recv from rank 1 tag 9") && Catch::Contains("rank 1"));
        }
        CHECK(seconds_since(t0) < 1.0);
      },
      o);
}
