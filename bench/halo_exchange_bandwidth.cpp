// Halo exchange bandwidth: the ProcessGroup's batch_isend_irecv against raw
// Gloo unbound-buffer calls moving the same bytes, measured side by side in
// one run (iterations interleaved, so both see the same machine state).
//
// Each rank exchanges one message of the given size with each neighbour
// (r-1, r+1; no wrap), the pattern of a 1-D halo exchange. Run with P=2:
//
//   dtensor-run -n 2 build/bin/dtensor-bench-halo [--min-kib 4] [--max-mib 16]
//
// or by hand: DTENSOR_RANK=0|1 DTENSOR_WORLD_SIZE=2 DTENSOR_STORE=file:/tmp/x.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>

#include "backends/gloo/store_adapter.h"
#include "dtensor/dtensor.h"
#include "median.h"

namespace {

using dtensor::bench::median;

using Clock = std::chrono::steady_clock;
constexpr int kRounds = 9;  // blocks per path and size; the median is reported

std::vector<int> neighbours(int rank, int size) {
  std::vector<int> n;
  if (rank > 0) n.push_back(rank - 1);
  if (rank + 1 < size) n.push_back(rank + 1);
  return n;
}

// The raw baseline: its own Gloo context (same transport, same address) and
// buffers created once, the best a hand-written Gloo exchange can do.
class RawGlooHalo {
 public:
  RawGlooHalo(const dtensor::ResolvedInit& init, std::size_t max_bytes) {
    auto store = dtensor::open_store(init.store, init.timeout, "DTENSOR_STORE");
    dtensor::gloo_backend::StoreAdapter prefixed(store, "bench.raw-gloo", init.timeout);
    gloo::transport::tcp::attr attr;
    attr.hostname = init.hostname.empty() ? "127.0.0.1" : init.hostname;
    device_ = gloo::transport::tcp::CreateDevice(attr);
    context_ = std::make_shared<gloo::rendezvous::Context>(init.rank, init.world_size);
    context_->setTimeout(init.timeout);
    context_->connectFullMesh(prefixed, device_);
    for (int peer : neighbours(init.rank, init.world_size)) {
      peers_.push_back(peer);
      send_.emplace_back(max_bytes, static_cast<char>(init.rank + 1));
      recv_.emplace_back(max_bytes, 0);
      send_buf_.push_back(context_->createUnboundBuffer(send_.back().data(), max_bytes));
      recv_buf_.push_back(context_->createUnboundBuffer(recv_.back().data(), max_bytes));
    }
  }

  void exchange(std::size_t nbytes) {
    constexpr std::uint64_t kSlot = 0x51;
    for (std::size_t i = 0; i < peers_.size(); ++i)
      recv_buf_[i]->recv(peers_[i], kSlot, 0, nbytes);
    for (std::size_t i = 0; i < peers_.size(); ++i)
      send_buf_[i]->send(peers_[i], kSlot, 0, nbytes);
    for (std::size_t i = 0; i < peers_.size(); ++i)
      recv_buf_[i]->waitRecv();
    for (std::size_t i = 0; i < peers_.size(); ++i)
      send_buf_[i]->waitSend();
  }

  bool received_from_peers(std::size_t nbytes) const {
    for (std::size_t i = 0; i < peers_.size(); ++i)
      for (std::size_t b = 0; b < nbytes; ++b)
        if (recv_[i][b] != static_cast<char>(peers_[i] + 1)) return false;
    return true;
  }

 private:
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::rendezvous::Context> context_;
  std::vector<int> peers_;
  std::vector<std::vector<char>> send_, recv_;
  std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> send_buf_, recv_buf_;
};

// The library path: tensors per neighbour, one batch_isend_irecv per exchange.
class ProcessGroupHalo {
 public:
  ProcessGroupHalo(dtensor::ProcessGroup& pg, std::size_t max_bytes) : pg_(pg) {
    const std::int64_t n = static_cast<std::int64_t>(max_bytes / sizeof(float));
    for (int peer : neighbours(pg.rank(), pg.size())) {
      peers_.push_back(peer);
      send_.push_back(dtensor::Tensor::full({n}, pg.rank() + 1.0, dtensor::DType::F32));
      recv_.push_back(dtensor::Tensor::zeros({n}, dtensor::DType::F32));
    }
  }

  void exchange(std::size_t nbytes) {
    const std::int64_t n = static_cast<std::int64_t>(nbytes / sizeof(float));
    std::vector<dtensor::P2POp> ops;
    for (std::size_t i = 0; i < peers_.size(); ++i) {
      ops.push_back(dtensor::P2POp::recv(recv_[i].narrow(0, 0, n), peers_[i]));
      ops.push_back(dtensor::P2POp::send(send_[i].narrow(0, 0, n), peers_[i]));
    }
    auto works = pg_.batch_isend_irecv(ops);
    dtensor::wait_all(works);
  }

  bool received_from_peers(std::size_t nbytes) const {
    for (std::size_t i = 0; i < peers_.size(); ++i)
      for (std::int64_t k = 0; k < static_cast<std::int64_t>(nbytes / sizeof(float)); ++k)
        if (recv_[i].item_flat(k) != peers_[i] + 1.0) return false;
    return true;
  }

 private:
  dtensor::ProcessGroup& pg_;
  std::vector<int> peers_;
  std::vector<dtensor::Tensor> send_, recv_;
};

std::size_t arg_value(int argc, char** argv, const char* name, std::size_t fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return std::strtoull(argv[i + 1], nullptr, 10);
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  const std::size_t min_bytes = arg_value(argc, argv, "--min-kib", 4) << 10;
  const std::size_t max_bytes = arg_value(argc, argv, "--max-mib", 16) << 20;
  auto pg = dtensor::init_process_group();
  const dtensor::ResolvedInit init = dtensor::resolve_init_options({});
  if (pg->size() < 2) {
    std::fprintf(stderr, "dtensor-bench-halo: needs at least 2 ranks (run it with P=2)\n");
    return 2;
  }
  RawGlooHalo raw(init, max_bytes);
  ProcessGroupHalo lib(*pg, max_bytes);
  const bool report = pg->rank() == 0;
  if (report)
    std::printf(
        "halo exchange, P=%d, one message each way per neighbour; time per exchange, median "
        "of %d blocks per path\n%10s %8s %12s %12s %11s %11s %9s\n",
        pg->size(), kRounds, "bytes", "iters", "pg_us", "raw_us", "pg_GB/s", "raw_GB/s", "pg/raw");
  bool all_correct = true;

  for (std::size_t bytes = min_bytes; bytes <= max_bytes; bytes *= 4) {
    // Blocks of back-to-back exchanges (a steady pipeline, as in a real halo
    // loop), the two paths alternating block by block and swapping order each
    // round so neither always runs first; a barrier before each block keeps a
    // peer's lag on one path out of the other's time.
    const int iters = static_cast<int>(std::clamp<std::size_t>((32u << 20) / bytes, 4, 200));
    for (int w = 0; w < 3; ++w) {  // warm-up: connections, socket buffers, page faults
      lib.exchange(bytes);
      raw.exchange(bytes);
    }
    std::vector<double> t_lib, t_raw;
    auto block = [&](auto& path) {
      pg->barrier();
      const auto t0 = Clock::now();
      for (int i = 0; i < iters; ++i)
        path.exchange(bytes);
      return std::chrono::duration<double>(Clock::now() - t0).count() / iters;
    };
    for (int round = 0; round < kRounds; ++round) {
      if (round % 2 == 0) {
        t_lib.push_back(block(lib));
        t_raw.push_back(block(raw));
      } else {
        t_raw.push_back(block(raw));
        t_lib.push_back(block(lib));
      }
    }
    all_correct = all_correct && lib.received_from_peers(bytes) && raw.received_from_peers(bytes);
    const double m_lib = median(t_lib), m_raw = median(t_raw);
    if (report)
      std::printf("%10zu %8d %12.1f %12.1f %11.3f %11.3f %9.3f\n", bytes, iters * kRounds,
                  m_lib * 1e6, m_raw * 1e6, bytes / m_lib / 1e9, bytes / m_raw / 1e9,
                  m_lib / m_raw);
  }
  if (report)
    std::printf("data check: %s; GB/s = message bytes per direction / median time\n",
                all_correct ? "ok" : "FAILED");
  dtensor::destroy_process_group();
  return all_correct ? 0 : 1;
}
