#include "backends/gloo/gloo_process_group.h"

#include <netdb.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <numeric>
#include <thread>

#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/alltoallv.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/address.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>

#include "backends/gloo/event_loop_device.h"
#include "backends/gloo/gloo_errors.h"
#include "backends/gloo/p2p_work.h"
#include "backends/gloo/reduce_kernels.h"
#include "backends/gloo/store_adapter.h"
#include "backends/gloo/traffic.h"
#include "core/detail/bruck_allgather.h"
#include "core/detail/direct_collectives.h"
#include "core/detail/halving_doubling_allreduce.h"
#include "dtensor/core/config.h"
#include "dtensor/core/direct_allreduce.h"
#include "dtensor/core/errors.h"
#include "dtensor/core/logging.h"

namespace dtensor::gloo_backend {
namespace {

// Gloo's collectives put their own prefix (0x01..0x08) in the top byte of a
// slot and the tag in bits 24..55; point-to-point messages use a prefix of
// their own so they never match a collective's. Gloo matches messages per
// connection, so the slot needs no (src, dst) component: equal tags between
// the same two ranks match in posting order, as in MPI.
constexpr std::uint64_t kP2PSlotPrefix = 0x40;
std::uint64_t p2p_slot(int tag) {
  return (kP2PSlotPrefix << 56) |
         (static_cast<std::uint64_t>(static_cast<std::uint32_t>(tag)) << 24);
}

// The direct collectives' messages (core/detail/direct_collectives.h): one
// slot, apart from both. Every rank makes its collectives in the same order
// and equal slots between two ranks match in posting order, so the messages
// of successive collectives pair up without a sequence number.
constexpr std::uint64_t kDirectCollectiveSlot = std::uint64_t{0x41} << 56;

// Ring allreduce segment size; traffic accounting must use the same value.
constexpr std::size_t kAllreduceSegmentBytes = 1 << 20;

std::string join(const std::vector<int>& v, const char* sep) {
  std::string s;
  for (std::size_t i = 0; i < v.size(); ++i)
    s += (i ? sep : "") + std::to_string(v[i]);
  return s;
}

std::vector<std::size_t> to_bytes(const std::vector<std::int64_t>& counts, std::size_t elem) {
  std::vector<std::size_t> out(counts.size());
  for (std::size_t i = 0; i < counts.size(); ++i)
    out[i] = static_cast<std::size_t>(counts[i]) * elem;
  return out;
}

std::vector<std::int64_t> to_byte_counts(const std::vector<std::int64_t>& counts,
                                         std::size_t elem) {
  std::vector<std::int64_t> out(counts.size());
  for (std::size_t i = 0; i < counts.size(); ++i)
    out[i] = counts[i] * static_cast<std::int64_t>(elem);
  return out;
}

char* bytes_of(const Tensor& t) {
  return static_cast<char*>(t.data_ptr());
}

// Copies src into dst unless they are the same memory (in-place calls).
void copy_bytes(const Tensor& dst, const Tensor& src) {
  if (src.nbytes() > 0 && dst.data_ptr() != src.data_ptr())
    std::memcpy(dst.data_ptr(), src.data_ptr(), src.nbytes());
}

std::atomic<int> g_world_generation{0};

// Gloo writes to its sockets with writev(), not send(MSG_NOSIGNAL): writing to
// a peer that died raises SIGPIPE, whose default action kills this process
// before Gloo can report the error. (Python ignores SIGPIPE, which is why
// PyTorch never meets this.) We ignore it too, but only if the application
// left it at the default: a handler it installed stays.
void ignore_sigpipe_unless_handled() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction current {};
    if (sigaction(SIGPIPE, nullptr, &current) != 0 || current.sa_handler != SIG_DFL) return;
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    if (sigaction(SIGPIPE, &ignore, nullptr) == 0)
      log::debug("gloo: SIGPIPE ignored so that a dead peer is an error, not our death");
  });
}

// Every pair carries a token both ways before a rendezvous counts as done.
// connectFullMesh succeeds on both sides of a pair whose listening side took
// an outsider's connection (a port scanner that connected and closed): the
// listener holds the outsider's socket, the real peer's connection waits
// unaccepted in the backlog, and the first collective failed with
// "Connection reset by peer" after the job had started. A token that does not
// arrive, or arrives wrong, makes this attempt fail and the rendezvous retry.
// Returns the failure in words, or "" when every pair works.
std::string verify_pairs(::gloo::rendezvous::Context& ctx, int rank, int size,
                         std::chrono::milliseconds timeout) {
  constexpr std::uint64_t kSlot = 0x7d7e0001;  // the context is new: nothing else uses it yet
  auto token = [](int from, int to) {
    return (std::uint64_t{0x5eed} << 48) | (static_cast<std::uint64_t>(from) << 24) |
           static_cast<std::uint64_t>(to);
  };
  std::vector<std::uint64_t> out(static_cast<std::size_t>(size)), in(out.size(), 0);
  std::vector<std::unique_ptr<::gloo::transport::UnboundBuffer>> sends, recvs;
  try {
    std::string error;
    translate_errors("pair check", [&] {
      for (int p = 0; p < size; ++p) {
        if (p == rank) continue;
        const auto k = static_cast<std::size_t>(p);
        out[k] = token(rank, p);
        recvs.push_back(ctx.createUnboundBuffer(&in[k], sizeof(std::uint64_t)));
        recvs.back()->recv(p, kSlot);
        sends.push_back(ctx.createUnboundBuffer(&out[k], sizeof(std::uint64_t)));
        sends.back()->send(p, kSlot);
      }
      for (std::size_t i = 0; i < recvs.size() && error.empty(); ++i)
        if (!recvs[i]->waitRecv(timeout) || !sends[i]->waitSend(timeout))
          error = fmt::format("no token within {} ms", timeout.count());
    });
    for (int p = 0; p < size && error.empty(); ++p)
      if (p != rank && in[static_cast<std::size_t>(p)] != token(p, rank))
        error = fmt::format("rank {}'s pair carried {:#x}, not its token", p,
                            in[static_cast<std::size_t>(p)]);
    return error;
  } catch (const Error& e) {  // a timeout too: here it means a broken pair
    return e.what();
  }
}

}  // namespace

GlooProcessGroup::GlooProcessGroup(int rank, int size, std::vector<int> global_ranks,
                                   std::shared_ptr<Store> store, std::string prefix,
                                   std::chrono::milliseconds timeout,
                                   std::shared_ptr<::gloo::transport::Device> device)
    : rank_(rank),
      size_(size),
      global_ranks_(std::move(global_ranks)),
      store_(std::move(store)),
      prefix_(std::move(prefix)),
      timeout_(timeout),
      device_(std::move(device)) {}

GlooProcessGroup::~GlooProcessGroup() {
  teardown_hurry_.start();
}

namespace {

// Gloo 0.5 looks a hostname up with getaddrinfo and, when that fails, walks
// the result it never got (an uninitialised pointer): a crash or a wrong
// error, by chance. So the name is resolved here first, as Gloo resolves it.
void check_resolves(const std::string& hostname, const std::string& what) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  const int rv = getaddrinfo(hostname.c_str(), nullptr, &hints, &result);
  if (result) freeaddrinfo(result);
  if (rv != 0)
    throw InvalidArgument("gloo", "cannot create a TCP device on " + what + ": " +
                                      "it does not resolve (" + gai_strerror(rv) + ")");
}

}  // namespace

std::shared_ptr<GlooProcessGroup> GlooProcessGroup::create_world(const BackendInit& init) {
  check_arg(init.world_size >= 1 && init.rank >= 0 && init.rank < init.world_size, "gloo",
            "rank {} is outside world of size {}", init.rank, init.world_size);
  check_arg(init.store != nullptr, "gloo", "store: a rendezvous store is required");
  std::vector<int> world(static_cast<std::size_t>(init.world_size));
  std::iota(world.begin(), world.end(), 0);
  // Every rank creates its worlds in the same order, so the generation agrees
  // across ranks and a second init in one job gets fresh store keys.
  const std::string prefix = "dtensor.gloo/world" + std::to_string(g_world_generation++);

  std::shared_ptr<::gloo::transport::Device> device;
  if (init.world_size > 1) {
    ::gloo::transport::tcp::attr attr;
    std::string what;
    // Loopback unless told otherwise: nothing listens off-host by default.
    if (!init.hostname.empty()) {
      attr.hostname = init.hostname;
      what = "hostname '" + init.hostname + "' (DTENSOR_HOSTNAME)";
      check_resolves(init.hostname, what);
    } else if (!init.iface.empty()) {
      attr.iface = init.iface;
      what = "interface '" + init.iface + "' (DTENSOR_IFNAME)";
    } else {
      attr.hostname = "127.0.0.1";
      what = "127.0.0.1";
    }
    ignore_sigpipe_unless_handled();
    try {
      device = create_tcp_device(attr);
    } catch (const std::exception& e) {
      throw InvalidArgument("gloo", "cannot create a TCP device on " + what + ": " + e.what());
    }
    log::debug("gloo: rank {} TCP device {}", init.rank, device->str());
  }
  std::shared_ptr<GlooProcessGroup> pg(new GlooProcessGroup(
      init.rank, init.world_size, std::move(world), init.store, prefix, init.timeout, device));
  if (init.world_size > 1) pg->connect();
  return pg;
}

void GlooProcessGroup::connect() {
  // A rendezvous attempt can fail without any rank being at fault, so every
  // member reports how its attempt went through the store, and if any
  // failed, all retry under a fresh prefix (fresh pairs, fresh ports):
  //  - under heavy load a Gloo TCP pair can end up connected on one side
  //    while the other side saw its socket closed (the connecting side gave
  //    up on a first socket and retried with a second; measured: ~1 in 40
  //    creations of a 2x2 mesh with the machine loaded 6x);
  //  - a Gloo pair takes the first connection to its listening port as its
  //    peer, with no handshake: any local process that connects there first
  //    (a port scanner, or one that keeps connecting on purpose) breaks the
  //    pair on both sides (docs/security.md). Three quick attempts let such
  //    a process stop every job from starting, so attempts go on, with a
  //    growing pause, for as long as DTENSOR_TIMEOUT allows.
  // A timeout is not retried: it already waited.
  //
  // DTENSOR_TIMEOUT bounds the whole rendezvous, retries included: each step
  // gets what is left of it (a peer that died mid-rendezvous must not keep
  // the others here for several timeouts). And Gloo waits 5x the context's
  // timeout for a pair's initial connection (tcp/pair.h, waitUntil: "a longer
  // timeout when waiting for initial connect"), so the pairs are created with
  // a fifth of the budget; the store waits still get all of it (StoreAdapter
  // never waits less than its own timeout), and the context's timeout is
  // restored once connected (operations pass theirs anyway).
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  auto budget = [&] {
    return std::max(std::chrono::duration_cast<std::chrono::milliseconds>(
                        deadline - std::chrono::steady_clock::now()),
                    std::chrono::milliseconds(1));
  };
  // The pause before attempt N+1: 10 ms doubling up to 1 s. Another attempt
  // is made only if it would still have a tenth of the timeout (at least
  // 100 ms) after the pause, on every rank: each rank's vote travels with
  // its outcome, so all decide alike and none waits for one that gave up.
  const auto pause = [](int attempt) {
    return std::min(std::chrono::milliseconds(10 << std::min(attempt, 7)),
                    std::chrono::milliseconds(1000));
  };
  const auto least_attempt = std::max(timeout_ / 10, std::chrono::milliseconds(100));
  std::shared_ptr<::gloo::rendezvous::Context> ctx;
  std::string prefix = prefix_;
  std::string last_error;
  for (int attempt = 0;; ++attempt) {
    prefix = attempt == 0 ? prefix_ : fmt::format("{}~retry{}", prefix_, attempt);
    ctx = std::make_shared<::gloo::rendezvous::Context>(rank_, size_);
    const auto attempt_budget = budget();
    ctx->setTimeout(std::max(attempt_budget / 5, std::chrono::milliseconds(1)));
    StoreAdapter store(store_, prefix, attempt_budget);
    log::debug("gloo: connecting group '{}' as rank {}/{} (world ranks {})", prefix, rank_, size_,
               join(global_ranks_, ","));
    std::string error;
    try {
      translate_errors("rendezvous of group '" + prefix + "'",
                       [&] { ctx->connectFullMesh(store, device_); });
    } catch (const TimeoutError&) {
      throw;
    } catch (const CommError& e) {
      error = e.what();
    }
    if (error.empty()) {
      const std::string broken = verify_pairs(
          *ctx, rank_, size_, std::max(attempt_budget / 5, std::chrono::milliseconds(1)));
      if (!broken.empty())
        error = "rendezvous of group '" + prefix + "': a pair is broken (" + broken + ")";
    }
    // A failed attempt's pairs are closed before the outcomes are compared,
    // so a peer still waiting on one of them hears of it at once.
    if (!error.empty()) ctx.reset();
    const bool can_retry = budget() >= pause(attempt) + least_attempt;
    StoreAdapter outcomes(store_, prefix, budget());
    outcomes.set("outcome/" + std::to_string(rank_),
                 std::vector<char>{error.empty() ? '1' : '0', can_retry ? 'r' : 's'});
    int failed_peer = -1;
    bool all_can_retry = true;
    for (int peer = 0; peer < size_; ++peer) {
      std::vector<char> v;
      translate_errors("rendezvous of group '" + prefix + "'",
                       [&] { v = outcomes.get("outcome/" + std::to_string(peer)); });
      if (v.empty() || v[0] != '1') failed_peer = peer;
      if (v.size() < 2 || v[1] != 'r') all_can_retry = false;
    }
    if (failed_peer < 0) {
      if (attempt > 0)
        log::warn("gloo: group '{}' connected at attempt {} (the earlier ones failed)", prefix_,
                  attempt + 1);
      break;
    }
    if (!error.empty()) last_error = error;
    if (!all_can_retry)
      throw CommError(
          "gloo",
          fmt::format("rendezvous of group '{}': failed {} times within DTENSOR_TIMEOUT "
                      "({} s); the last failure: {} (another process connecting to "
                      "the job's listening ports makes every attempt fail: see "
                      "docs/security.md, \"Gloo's TCP pairs\")",
                      prefix_, attempt + 1, timeout_.count() / 1000.0,
                      last_error.empty() ? fmt::format("rank {} could not connect", failed_peer)
                                         : last_error));
    // The first failure is worth a warning; a run of them (an outsider
    // connecting again and again) would flood the log.
    const std::string why = error.empty() ? "reported by the peer" : error;
    if (attempt == 0)
      log::warn("gloo: rendezvous of group '{}' failed on rank {} ({}); retrying", prefix,
                failed_peer, why);
    else
      log::debug("gloo: rendezvous of group '{}' failed on rank {} ({}); retrying", prefix,
                 failed_peer, why);
    std::this_thread::sleep_for(pause(attempt));
  }
  ctx->setTimeout(timeout_);
  StoreAdapter store(store_, prefix, timeout_);
  context_ = std::move(ctx);
  // Each rank published the addresses of its pairs, one per peer, in rank
  // order without itself (Gloo's rendezvous layout); ours is at our slot.
  try {
    for (int peer = 0; peer < size_; ++peer) {
      if (peer == rank_) continue;
      const std::vector<char> all = store.get(std::to_string(peer));
      const std::size_t width = all.size() / static_cast<std::size_t>(size_ - 1);
      const std::size_t slot = static_cast<std::size_t>(rank_ > peer ? rank_ - 1 : rank_);
      const std::vector<char> mine(all.begin() + slot * width, all.begin() + (slot + 1) * width);
      peer_by_address_[::gloo::transport::tcp::Address(mine).str()] = peer;
    }
  } catch (const std::exception& e) {
    // Only error messages lose their rank names.
    log::debug("gloo: cannot map peer addresses to ranks: {}", e.what());
  }
  const std::vector<std::string> hosts = ShmChannel::hosts(store, rank_, size_, config().gloo_shm);
  shm_ = ShmChannel::connect(store, rank_, hosts);
  one_host_ = ShmChannel::one_host(hosts);
  log::debug("gloo: group '{}' connected ({} peers)", prefix_, size_ - 1);
}

std::string GlooProcessGroup::name_peers(const std::string& msg) const {
  std::string out = msg;
  for (const auto& [address, peer] : peer_by_address_) {
    const auto at = out.find(address);
    if (at == std::string::npos) continue;
    std::string name = fmt::format(" (= rank {}", peer);
    if (global_ranks_[peer] != peer) name += fmt::format(", world rank {}", global_ranks_[peer]);
    out.insert(at + address.size(), name + ")");
  }
  return out;
}

void GlooProcessGroup::check_usable(const CallName& op) const {
  std::lock_guard lock(mutex_);
  if (!failure_.empty())
    throw CommError("gloo",
                    op.str() + ": the group is unusable after an earlier failure: " + failure_);
}

void GlooProcessGroup::fail(const std::string& reason) {
  {
    std::lock_guard lock(mutex_);
    if (!failure_.empty()) return;
    failure_ = reason;
  }
  log::debug("gloo: group '{}' broken: {}", prefix_, reason);
  if (shm_) shm_->close();
  if (!context_) return;
  // Gloo has no public "abort": but a wait that times out signals every
  // connection of the context (closing its sockets and failing its pending
  // operations), so a zero-timeout wait on an empty buffer does exactly that.
  // Peers then see their connection close instead of waiting out a timeout.
  try {
    auto poison = context_->createUnboundBuffer(nullptr, 0);
    poison->waitRecv(nullptr, std::chrono::milliseconds(0));
  } catch (...) {
    // Expected: the wait reports the timeout it just simulated.
  }
  // A collective under way usually fails now too; one whose message was half
  // read does not (collective_thread.h), and its caller must not wait for it.
  collectives_.abort(reason);
}

void GlooProcessGroup::abort(const std::string& reason) {
  fail(reason);
  std::lock_guard lock(mutex_);
  for (auto& [buffer, is_send] : waiting_) {
    if (is_send)
      buffer->abortWaitSend();
    else
      buffer->abortWaitRecv();
  }
}

bool GlooProcessGroup::begin_wait(::gloo::transport::UnboundBuffer* buffer, bool is_send) {
  std::lock_guard lock(mutex_);
  if (!failure_.empty()) return false;
  waiting_.emplace_back(buffer, is_send);
  return true;
}

void GlooProcessGroup::end_wait(::gloo::transport::UnboundBuffer* buffer) {
  std::lock_guard lock(mutex_);
  std::erase_if(waiting_, [&](const auto& w) { return w.first == buffer; });
}

void GlooProcessGroup::park_unfinished(std::unique_ptr<::gloo::transport::UnboundBuffer> buffer,
                                       Tensor tensor) {
  std::lock_guard lock(mutex_);
  parked_.emplace_back(std::move(buffer), std::move(tensor));
}

template <typename Fn>
void GlooProcessGroup::run_collective(const CallName& op, Fn&& call) {
  check_usable(op);
  try {
    translate_errors(op, [&] {
      try {
        collectives_.run(op, std::forward<Fn>(call));
      } catch (const ::gloo::IoException& e) {
        throw ::gloo::IoException(name_peers(e.what()));
      }
    });
  } catch (const CommError& e) {
    fail(e.what());
    throw;
  }
}

void GlooProcessGroup::account(std::uint64_t sent, std::uint64_t received, std::uint64_t messages) {
  counters_.bytes_sent += sent;
  counters_.bytes_received += received;
  counters_.messages_sent += messages;
}

// What a message costs beyond its bytes (the halo chains' cost model):
// dtensor-bench-mpi-gloo's 4 KiB halo exchange at P = 2 takes 4.8-5.0 us
// through shared memory; over loopback TCP a message took ~40 us (Gloo's
// event-loop thread hands each one over: docs/halo.md).
double GlooProcessGroup::message_seconds() const {
  return one_host_ ? 5e-6 : ProcessGroup::message_seconds();
}

// ---- point to point ----

std::shared_ptr<Work> GlooProcessGroup::isend(const Tensor& t, int dst, int tag) {
  return post_p2p(true, t, dst, tag);
}

std::shared_ptr<Work> GlooProcessGroup::irecv(const Tensor& t, int src, int tag) {
  return post_p2p(false, t, src, tag);
}

std::shared_ptr<Work> GlooProcessGroup::post_p2p(bool is_send, const Tensor& t, int peer, int tag) {
  // Arguments and messages to this rank never get here: the validating layer
  // in front of every backend checks the one and delivers the other.
  return post_transfer(is_send, t, peer, p2p_slot(tag),
                       P2PName{is_send, peer, global_ranks_[peer], tag});
}

std::shared_ptr<Work> GlooProcessGroup::post_transfer(bool is_send, const Tensor& t, int peer,
                                                      std::uint64_t slot, const P2PName& what) {
  check_usable(what);
  if (shm_ && shm_->reaches(peer)) {
    auto work = shm_->post(is_send, t, peer, slot, what, shared_from_this());
    if (is_send) account(t.nbytes(), 0, 1);
    return work;
  }
  std::unique_ptr<::gloo::transport::UnboundBuffer> buffer;
  try {
    translate_errors(what, [&] {
      buffer = pool_.acquire(*context_, t.data_ptr(), t.nbytes());
      if (is_send) {
        let_event_loop_catch_up();
        buffer->send(peer, slot);
      } else {
        buffer->recv(peer, slot);
      }
    });
  } catch (const CommError& e) {
    fail(e.what());
    throw;
  }
  if (is_send) account(t.nbytes(), 0, 1);
  return std::make_shared<P2PWork>(shared_from_this(), is_send, t, std::move(buffer), what);
}

// ---- collectives ----
//
// Each call runs on the collective thread (collective_thread.h) and owns what
// it touches: the context, the tensors (their storage) and the counts are
// captured by value, and the options are built on that thread.

void GlooProcessGroup::allreduce(Tensor& t, ReduceOp op) {
  const std::size_t n = static_cast<std::size_t>(t.numel());
  if (size_ == 1 || n == 0) return;  // the reduction of one contribution is itself (Avg too)
  switch (detail::allreduce_algorithm(t.nbytes(), size_)) {
    case detail::AllreduceAlgorithm::Direct:
      return allreduce_direct(t, op);
    case detail::AllreduceAlgorithm::HalvingDoubling:
      return allreduce_halving_doubling(t, op);
    case detail::AllreduceAlgorithm::Ring:
      break;
  }
  visit_dtype(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    run_collective(
        [&] {
          return fmt::format("allreduce({}, {} x {})", reduce_op_name(op), n,
                             dtype_name(t.dtype()));
        },
        [context = context_, t, n, op, timeout = timeout_] {
          ::gloo::AllreduceOptions opts(context);
          opts.setOutput<T>(static_cast<T*>(t.data_ptr()), n);
          opts.setReduceFunction(gloo_reduce_fn<T>(op));
          opts.setAlgorithm(::gloo::AllreduceOptions::Algorithm::RING);
          opts.setMaxSegmentSize(kAllreduceSegmentBytes);
          opts.setTimeout(timeout);
          ::gloo::allreduce(opts);
        });
    if (op == ReduceOp::Avg) divide_in_place<T>(t.data<T>(), n, size_);
  });
  const Traffic tr = ring_allreduce_traffic(t.nbytes(), dtype_size(t.dtype()),
                                            kAllreduceSegmentBytes, size_, rank_);
  account(tr.bytes_sent, tr.bytes_received, tr.messages_sent);
}

DirectAllreduce::Post GlooProcessGroup::collective_post(const CollectiveName& name) {
  // On the direct collectives' own slot, each message named by the
  // collective, as a failure of the ring's would be.
  return [this, name](const P2POp& m) {
    const bool is_send = m.kind == P2POp::Kind::Send;
    return post_transfer(is_send, m.tensor, m.peer, kDirectCollectiveSlot,
                         P2PName{is_send, m.peer, global_ranks_[m.peer], 0, name});
  };
}

void GlooProcessGroup::allreduce_direct(Tensor& t, ReduceOp op) {
  DirectAllreduce(rank_, size_, t, op, collective_post({"allreduce", op, t.numel(), t.dtype()}))
      .finish();
}

void GlooProcessGroup::allreduce_halving_doubling(Tensor& t, ReduceOp op) {
  detail::halving_doubling_allreduce(rank_, size_, t, op,
                                     collective_post({"allreduce", op, t.numel(), t.dtype()}));
}

void GlooProcessGroup::broadcast(Tensor& t, int root) {
  if (size_ == 1 || t.nbytes() == 0) return;
  run_collective([&] { return fmt::format("broadcast(root {}, {} bytes)", root, t.nbytes()); },
                 [context = context_, t, root, timeout = timeout_] {
                   ::gloo::BroadcastOptions opts(context);
                   opts.setOutput<char>(bytes_of(t), t.nbytes());
                   opts.setRoot(root);
                   opts.setTimeout(timeout);
                   ::gloo::broadcast(opts);
                 });
  const Traffic tr = broadcast_traffic(t.nbytes(), size_, rank_, root);
  account(tr.bytes_sent, tr.bytes_received, tr.messages_sent);
}

void GlooProcessGroup::allgather(const Tensor& in, Tensor& out,
                                 const std::vector<std::int64_t>& counts) {
  const std::size_t elem = dtype_size(in.dtype());
  if (size_ == 1) {
    copy_bytes(out, in);
    return;
  }
  if (out.nbytes() == 0) return;  // every rank knows the counts: all skip alike
  const std::vector<std::size_t> block_bytes = to_bytes(counts, elem);
  // When `in` already sits at its place in `out` (in-place), Gloo needs no input.
  const std::size_t my_offset =
      std::accumulate(block_bytes.begin(), block_bytes.begin() + rank_, std::size_t{0});
  const bool in_place = in.data_ptr() == bytes_of(out) + my_offset;
  switch (detail::allgather_algorithm(out.nbytes(), size_)) {
    case detail::AllgatherAlgorithm::Direct:
      return allgather_direct(in, out, counts, in_place);
    case detail::AllgatherAlgorithm::Bruck:
      return detail::bruck_allgather(
          rank_, in, out, counts,
          collective_post({"allgather", std::nullopt, out.numel(), out.dtype()}));
    case detail::AllgatherAlgorithm::Ring:
      break;
  }
  run_collective(
      [&] { return fmt::format("allgather({} x {})", out.numel(), dtype_name(out.dtype())); },
      [context = context_, in, out, block_bytes, in_place, timeout = timeout_] {
        ::gloo::AllgathervOptions opts(context);
        if (!in_place) opts.setInput<char>(bytes_of(in), in.nbytes());
        opts.setOutput<char>(bytes_of(out), block_bytes);
        opts.setTimeout(timeout);
        ::gloo::allgatherv(opts);
      });
  const Traffic tr = allgatherv_traffic(block_bytes, rank_);
  account(tr.bytes_sent, tr.bytes_received, tr.messages_sent);
}

void GlooProcessGroup::allgather_direct(const Tensor& in, Tensor& out,
                                        const std::vector<std::int64_t>& counts, bool in_place) {
  // Every rank knows the counts, so an empty block is skipped alike by its
  // sender and its receivers.
  const Tensor flat = out.view({out.numel()});
  const auto post = collective_post({"allgather", std::nullopt, out.numel(), out.dtype()});
  std::vector<std::int64_t> offsets(counts.size(), 0);
  std::partial_sum(counts.begin(), counts.end() - 1, offsets.begin() + 1);
  std::vector<std::shared_ptr<Work>> works;
  for (int q = 0; q < size_; ++q)
    if (q != rank_ && counts[q] > 0)
      works.push_back(post(P2POp::recv(flat.narrow(0, offsets[q], counts[q]), q)));
  Tensor mine = flat.narrow(0, offsets[rank_], counts[rank_]);
  if (!in_place && counts[rank_] > 0) mine.copy_(in.view({counts[rank_]}));
  if (counts[rank_] > 0)
    for (int q = 0; q < size_; ++q)
      if (q != rank_) works.push_back(post(P2POp::send(mine, q)));
  wait_all(works);
}

void GlooProcessGroup::reduce_scatter(const Tensor& in, Tensor& out,
                                      const std::vector<std::int64_t>& counts, ReduceOp op) {
  if (size_ == 1) {
    copy_bytes(out, in);  // one contribution: Sum, Avg, Max and Min are all the identity
    return;
  }
  if (in.nbytes() == 0) return;
  // All-to-all moves block q to rank q — (P-1)/P of the data, like a ring
  // reduce-scatter, in one step — then each rank reduces its P blocks locally.
  const std::size_t elem = dtype_size(in.dtype());
  const std::int64_t mine = counts[rank_];
  Tensor gathered = Tensor::empty({mine * size_}, in.dtype());
  const std::vector<std::int64_t> recv_counts(static_cast<std::size_t>(size_), mine);
  all_to_all_bytes(fmt::format("reduce_scatter({}, {} x {})", reduce_op_name(op), in.numel(),
                               dtype_name(in.dtype())),
                   in, to_byte_counts(counts, elem), gathered, to_byte_counts(recv_counts, elem));
  visit_dtype(in.dtype(), [&](auto tag) {
    using T = decltype(tag);
    reduce_blocks<T>(op, gathered.data<T>(), static_cast<std::size_t>(size_),
                     static_cast<std::size_t>(mine), static_cast<std::size_t>(mine), out.data<T>());
  });
  const Traffic tr = alltoallv_traffic(to_bytes(counts, elem), to_bytes(recv_counts, elem), rank_);
  account(tr.bytes_sent, tr.bytes_received, tr.messages_sent);
}

void GlooProcessGroup::all_to_all(const Tensor& in, const std::vector<std::int64_t>& send_counts,
                                  Tensor& out, const std::vector<std::int64_t>& recv_counts) {
  if (size_ == 1) {
    copy_bytes(out, in);
    return;
  }
  // No early exit on empty buffers: only this rank knows its counts, and the
  // others still expect its (empty) messages.
  const std::size_t elem = dtype_size(in.dtype());
  all_to_all_bytes(
      fmt::format("all_to_all({} -> {} x {})", in.numel(), out.numel(), dtype_name(in.dtype())), in,
      to_byte_counts(send_counts, elem), out, to_byte_counts(recv_counts, elem));
  const Traffic tr =
      alltoallv_traffic(to_bytes(send_counts, elem), to_bytes(recv_counts, elem), rank_);
  account(tr.bytes_sent, tr.bytes_received, tr.messages_sent);
}

void GlooProcessGroup::all_to_all_bytes(const std::string& op, const Tensor& in,
                                        std::vector<std::int64_t> send_bytes, const Tensor& out,
                                        std::vector<std::int64_t> recv_bytes) {
  run_collective(op, [context = context_, in, send_bytes = std::move(send_bytes), out,
                      recv_bytes = std::move(recv_bytes), timeout = timeout_] {
    ::gloo::AlltoallvOptions opts(context);
    opts.setInput<char>(bytes_of(in), send_bytes);
    opts.setOutput<char>(bytes_of(out), recv_bytes);
    opts.setTimeout(timeout);
    ::gloo::alltoallv(opts);
  });
}

void GlooProcessGroup::barrier() {
  if (size_ == 1) return;
  run_collective("barrier", [context = context_, timeout = timeout_] {
    ::gloo::BarrierOptions opts(context);
    opts.setTimeout(timeout);
    ::gloo::barrier(opts);
  });
  const Traffic tr = barrier_traffic(size_);
  account(tr.bytes_sent, tr.bytes_received, tr.messages_sent);
}

// ---- subgroups ----

std::shared_ptr<ProcessGroup> GlooProcessGroup::new_subgroup(const std::vector<int>& ranks) {
  // The validating layer checked `ranks` (validating_process_group.h).
  const auto me = std::find(ranks.begin(), ranks.end(), rank_);
  check_usable("new_subgroup");
  int serial;
  {
    // Members create their groups in the same order, so counting per member
    // list gives every member the same, unique store prefix without talking.
    std::lock_guard lock(mutex_);
    serial = subgroups_made_[ranks]++;
  }
  const std::string prefix = prefix_ + "/sub" + join(ranks, ".") + "#" + std::to_string(serial);
  std::vector<int> global;
  for (int r : ranks)
    global.push_back(global_ranks_[r]);
  const int sub_rank = static_cast<int>(me - ranks.begin());
  const int sub_size = static_cast<int>(ranks.size());
  std::shared_ptr<GlooProcessGroup> sub(new GlooProcessGroup(sub_rank, sub_size, std::move(global),
                                                             store_, prefix, timeout_, device_));
  if (sub_size > 1) sub->connect();  // a group of one needs no connection
  return sub;
}

}  // namespace dtensor::gloo_backend
