#include "backends/gloo/shm_channel.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <sched.h>
#include <algorithm>
#include <cerrno>
#include <climits>
#include <csignal>
#include <deque>
#include <fstream>
#include <mutex>
#include <new>
#include <random>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "backends/gloo/gloo_errors.h"
#include "backends/gloo/gloo_process_group.h"
#include "backends/gloo/shm_ring.h"
#include "backends/gloo/store_adapter.h"
#include "backends/gloo/transfer_work.h"
#include "core/detail/wait_spin.h"
#include "dtensor/core/config.h"
#include "dtensor/core/errors.h"
#include "dtensor/core/logging.h"

namespace dtensor::gloo_backend {
namespace {

using Clock = std::chrono::steady_clock;

constexpr std::uint64_t kMagic = 0x31306d6873746464ULL;  // "ddtshm01"
// A message starts with its slot and length.
struct MessageHeader {
  std::uint64_t slot;
  std::uint64_t nbytes;
};
// A waiter with nothing to read spins (Impl::spin, core/detail/wait_spin.h:
// the peer is usually about to write), then sleeps on the bell in slices, so
// that it also looks at its other peers and at its deadline.
constexpr auto kSleepSlice = std::chrono::milliseconds(1);
constexpr auto kAliveCheckEvery = std::chrono::milliseconds(100);

// The shared page of one pair: side 0 is the lower rank, side 1 the higher.
struct alignas(64) PairControl {
  std::uint64_t magic;
  std::uint64_t nonce;
  std::uint64_t ring_bytes;
  std::int32_t pid[2];
  // bell[s]: bumped whenever side s may have something to do (bytes to read,
  // room to write); sleeping[s]: how many of side s's threads sleep on it.
  alignas(64) std::atomic<std::uint32_t> bell[2];
  alignas(64) std::atomic<std::uint32_t> sleeping[2];
  // closed[s]: side s's group failed; its peer's waits end.
  std::atomic<std::uint32_t> closed[2];
};

struct Layout {
  static constexpr std::size_t control = 0;
  static constexpr std::size_t counters = sizeof(PairControl);  // two RingCounters
  static constexpr std::size_t data = counters + 2 * sizeof(shm::RingCounters);
  static std::size_t total(std::uint64_t ring) { return data + 2 * ring; }
};

long futex(std::atomic<std::uint32_t>* word, int op, std::uint32_t value,
           const struct timespec* timeout) {
  return syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), op, value, timeout, nullptr, 0);
}

// The host of a member that has shared memory off, or cannot tell its host.
constexpr const char* kNoHost = "off";

std::string host_key(bool enabled) {
  if (!enabled) return kNoHost;
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  struct stat pid_ns {};
  struct stat ipc_ns {};
  struct stat net_ns {};
  if (boot.empty() || stat("/proc/self/ns/pid", &pid_ns) != 0 ||
      stat("/proc/self/ns/ipc", &ipc_ns) != 0 || stat("/proc/self/ns/net", &net_ns) != 0)
    return kNoHost;
  return fmt::format("{}/{}/{}/{}/{}", boot, pid_ns.st_ino, ipc_ns.st_ino, net_ns.st_ino, getuid());
}

std::uint64_t random64() {
  std::random_device rd;
  return (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
}

// A killed process stays a zombie until its parent reaps it: gone as well.
bool process_alive(pid_t pid) {
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  std::ifstream stat(fmt::format("/proc/{}/stat", pid));
  std::string line;
  if (!std::getline(stat, line)) return true;  // cannot tell: assume alive
  const auto end = line.rfind(')');            // the name may hold spaces and parentheses
  return end == std::string::npos || end + 2 >= line.size() ||
         (line[end + 2] != 'Z' && line[end + 2] != 'X');
}

std::vector<char> bytes(const std::string& s) {
  return {s.begin(), s.end()};
}
std::string text(const std::vector<char>& v) {
  return {v.begin(), v.end()};
}

struct Op {
  bool is_send;
  int peer;
  std::uint64_t slot;
  std::shared_ptr<Storage> storage;  // keeps the memory alive while the transfer may touch it
  char* data;
  std::uint64_t nbytes;
  std::uint64_t done = 0;
  bool header_sent = false;
  std::atomic<bool> complete{false};
  std::string error;  // set before complete
};

// A message that arrived before its receive was posted, read out of the ring
// because a later message was needed (or the sender needed room).
struct Early {
  std::unique_ptr<char[]> bytes;
  std::uint64_t nbytes = 0;
  bool whole = false;
  std::shared_ptr<Op> claimed;  // the receive posted while it still arrived
};

struct Peer {
  int rank = -1;
  int side = 0;  // ours in the pair
  void* map = nullptr;
  std::size_t map_bytes = 0;
  PairControl* control = nullptr;
  shm::Ring out{nullptr, nullptr, 1};
  shm::Ring in{nullptr, nullptr, 1};
  std::deque<std::shared_ptr<Op>> sends;
  std::unordered_map<std::uint64_t, std::deque<std::shared_ptr<Op>>> posted;
  std::size_t posted_count = 0;  // receives in `posted`
  std::unordered_map<std::uint64_t, std::deque<std::shared_ptr<Early>>> early;
  // The message being read.
  bool reading = false;
  MessageHeader header{};
  std::uint64_t read_done = 0;
  std::shared_ptr<Op> into_op;
  std::shared_ptr<Early> into_early;

  int other() const { return 1 - side; }
  void ring_other() const {
    control->bell[other()].fetch_add(1, std::memory_order_seq_cst);
    if (control->sleeping[other()].load(std::memory_order_seq_cst) > 0)
      futex(&control->bell[other()], FUTEX_WAKE, INT_MAX, nullptr);
  }
};

void finish(Op& op, std::string error = {}) {
  op.error = std::move(error);
  op.complete.store(true, std::memory_order_release);
}

std::string closed_by(const Peer& p) {
  return fmt::format("rank {} closed its connections", p.rank);
}

std::string size_mismatch(const Op& op, std::uint64_t got) {
  return fmt::format("expected {} bytes, the message has {}", op.nbytes, got);
}

}  // namespace

struct ShmChannel::Impl {
  std::vector<int> index;  // group rank -> position in peers, or -1
  std::vector<Peer> peers;
  std::mutex mutex;
  std::atomic<bool> aborted{false};
  std::chrono::microseconds spin{50};  // how long a waiter spins before it sleeps

  ~Impl() {
    // A peer still waiting on this rank hears that it went, as a closed
    // TCP connection would tell it.
    for (auto& p : peers) {
      p.control->closed[p.side].store(1, std::memory_order_release);
      p.ring_other();
      munmap(p.map, p.map_bytes);
    }
  }

  Peer* find(int peer) {
    return peer >= 0 && peer < static_cast<int>(index.size()) && index[peer] >= 0
               ? &peers[static_cast<std::size_t>(index[peer])]
               : nullptr;
  }

  bool progress_sends(Peer& p) {
    bool moved = false;
    while (!p.sends.empty()) {
      Op& op = *p.sends.front();
      if (!op.header_sent) {
        if (!p.out.has_room(sizeof(MessageHeader))) break;
        const MessageHeader h{op.slot, op.nbytes};
        p.out.write(reinterpret_cast<const char*>(&h), sizeof h);
        op.header_sent = moved = true;
      }
      const std::uint64_t n = p.out.write(op.data + op.done, op.nbytes - op.done);
      op.done += n;
      moved = moved || n > 0;
      if (op.done < op.nbytes) break;
      finish(op);
      p.sends.pop_front();
    }
    return moved;
  }

  /// Starts reading the message at the head of the ring: into its
  /// receive if one is posted, else (when `drain`) into memory of its own.
  /// False: left in the ring, where its receive will read it directly.
  bool start_message(Peer& p, bool drain) {
    p.in.peek(reinterpret_cast<char*>(&p.header), sizeof p.header);
    const auto waiting_it = p.posted.find(p.header.slot);
    const bool matched = waiting_it != p.posted.end() && !waiting_it->second.empty();
    if (!matched && !drain) return false;
    p.in.read(nullptr, sizeof p.header);
    p.reading = true;
    p.read_done = 0;
    if (matched) {
      auto& waiting = waiting_it->second;
      p.into_op = std::move(waiting.front());
      waiting.pop_front();
      --p.posted_count;
      if (p.into_op->nbytes != p.header.nbytes) {
        // Read past it, and fail the receive: the stream stays in step.
        finish(*p.into_op, size_mismatch(*p.into_op, p.header.nbytes));
        p.into_op.reset();
      }
    } else {
      p.into_early = std::make_shared<Early>();
      p.into_early->bytes.reset(new char[p.header.nbytes]);  // no zeroing: written next
      p.into_early->nbytes = p.header.nbytes;
      p.early[p.header.slot].push_back(p.into_early);
    }
    return true;
  }

  void end_message(Peer& p) {
    p.reading = false;
    if (p.into_op) finish(*p.into_op);
    if (p.into_early) {
      p.into_early->whole = true;
      if (auto op = p.into_early->claimed) {
        std::memcpy(op->data, p.into_early->bytes.get(), op->nbytes);
        finish(*op);
      }
    }
    p.into_op.reset();
    p.into_early.reset();
  }

  /// A message whose receive is not posted stays in the ring (its receive
  /// then reads it once) unless a receive behind it waits (a later message
  /// is needed) or `drain` (a wait that found nothing else to do: the
  /// sender may need the room).
  bool progress_receives(Peer& p, bool drain) {
    bool moved = false;
    for (;;) {
      if (!p.reading) {
        if (p.in.readable() < sizeof(MessageHeader)) break;
        if (!start_message(p, drain || p.posted_count > 0)) break;
        moved = true;
      }
      const std::uint64_t n = std::min(p.in.readable(), p.header.nbytes - p.read_done);
      char* dst = p.into_op      ? p.into_op->data + p.read_done
                  : p.into_early ? p.into_early->bytes.get() + p.read_done
                                 : nullptr;
      p.in.read(dst, n);
      p.read_done += n;
      moved = moved || n > 0;
      if (p.read_done < p.header.nbytes) break;
      end_message(p);
    }
    return moved;
  }

  /// Moves every peer's queues along; whether anything moved. Holds mutex.
  bool progress(bool drain = false) {
    bool any = false;
    for (auto& p : peers) {
      const bool sent = progress_sends(p);
      const bool read = progress_receives(p, drain);
      if (sent || read) p.ring_other();
      any = any || sent || read;
    }
    return any;
  }

  void post_receive(Peer& p, const std::shared_ptr<Op>& op) {
    auto& arrived = p.early[op->slot];
    if (arrived.empty()) {
      p.posted[op->slot].push_back(op);
      ++p.posted_count;
      return;
    }
    auto early = std::move(arrived.front());
    arrived.pop_front();
    if (early->nbytes != op->nbytes) {
      finish(*op, size_mismatch(*op, early->nbytes));
    } else if (early->whole) {
      std::memcpy(op->data, early->bytes.get(), op->nbytes);
      finish(*op);
    } else {
      early->claimed = op;
    }
  }

  /// "rank R (pid N) exited" when `p`'s process is gone, or empty. (A peer
  /// that closed its side says so in the shared page: the wait looks at
  /// that flag on every pass, at this only now and then.)
  static std::string peer_exited(const Peer& p) {
    const pid_t pid = p.control->pid[p.other()];
    if (!process_alive(pid)) return fmt::format("rank {} (pid {}) exited", p.rank, pid);
    return {};
  }

  void wait(Op& op, std::chrono::milliseconds timeout, const P2PName& what,
            GlooProcessGroup& group) {
    Peer& p = *find(op.peer);
    const auto start = Clock::now();
    const auto deadline = start + timeout;
    auto idle_since = start;
    auto alive_checked = start;
    for (;;) {
      bool moved;
      {
        std::lock_guard lock(mutex);
        moved = progress(/*drain=*/Clock::now() - idle_since >= spin);
      }
      if (op.complete.load(std::memory_order_acquire)) {
        if (!op.error.empty()) throw CommError("gloo", what.str() + ": " + op.error);
        return;
      }
      if (aborted.load(std::memory_order_acquire)) {
        group.check_usable(what);
        throw CommError("gloo", what.str() + ": aborted");
      }
      const auto now = Clock::now();
      if (p.control->closed[p.other()].load(std::memory_order_acquire) != 0)
        throw CommError("gloo", what.str() + ": " + connection_failed(closed_by(p)));
      if (now >= deadline)
        throw TimeoutError("gloo",
                           fmt::format("{}: timed out after {} ms", what.str(), timeout.count()));
      if (moved) {
        idle_since = now;
        continue;
      }
      if (now - idle_since < spin) {
        sched_yield();  // lets a thread sharing the core (two ranks on one) go first
        continue;
      }
      if (now - alive_checked >= kAliveCheckEvery) {
        alive_checked = now;
        if (const std::string gone = peer_exited(p); !gone.empty())
          throw CommError("gloo", what.str() + ": " + connection_failed(gone));
      }
      auto& bell = p.control->bell[p.side];
      auto& sleeping = p.control->sleeping[p.side];
      sleeping.fetch_add(1, std::memory_order_seq_cst);
      const std::uint32_t seen = bell.load(std::memory_order_seq_cst);
      bool moved_now;
      {
        std::lock_guard lock(mutex);
        moved_now = progress(/*drain=*/true);
      }
      if (!moved_now && !op.complete.load(std::memory_order_acquire) &&
          !aborted.load(std::memory_order_acquire)) {
        const auto slice = std::min<Clock::duration>(kSleepSlice, deadline - now);
        const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(slice).count();
        struct timespec ts {
          static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)
        };
        futex(&bell, FUTEX_WAIT, seen, &ts);
      }
      sleeping.fetch_sub(1, std::memory_order_seq_cst);
      if (moved_now) idle_since = Clock::now();
    }
  }

  void wake_own() {
    for (auto& p : peers) {
      p.control->bell[p.side].fetch_add(1, std::memory_order_seq_cst);
      futex(&p.control->bell[p.side], FUTEX_WAKE, INT_MAX, nullptr);
    }
  }
};

namespace {

class ShmWork : public TransferWork {
 public:
  ShmWork(std::shared_ptr<ShmChannel> channel, ShmChannel::Impl& impl, std::shared_ptr<Op> op,
          P2PName what, std::shared_ptr<GlooProcessGroup> group)
      : TransferWork(std::move(group), what),
        channel_(std::move(channel)),
        impl_(impl),
        op_(std::move(op)) {}

 private:
  void wait_transfer(std::chrono::milliseconds timeout) override {
    impl_.wait(*op_, timeout, what_, *group_);
  }
  void finished_well() override {
    if (!op_->is_send) group_->counters().bytes_received += op_->nbytes;
  }

  std::shared_ptr<ShmChannel> channel_;  // keeps the mappings alive
  ShmChannel::Impl& impl_;
  std::shared_ptr<Op> op_;  // stays queued if dropped unfinished, as Gloo's would
};

// Creates and maps a fresh segment; null (and logged) when the host refuses.
void* create_segment(const std::string& name, std::size_t bytes) {
  const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) {
    log::debug("gloo: shared memory: cannot create {}: {}", name, std::strerror(errno));
    return nullptr;
  }
  // Reserve the pages now: a full /dev/shm must refuse here, not raise
  // SIGBUS at the first write.
  const int rc = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  void* map =
      rc == 0 ? mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
  close(fd);
  if (map == MAP_FAILED) {
    log::debug("gloo: shared memory: cannot size or map {}: {}", name,
               std::strerror(rc != 0 ? rc : errno));
    shm_unlink(name.c_str());
    return nullptr;
  }
  return map;
}

void* open_segment(const std::string& name, std::uint64_t nonce, std::uint64_t ring) {
  const int fd = shm_open(name.c_str(), O_RDWR, 0600);
  if (fd < 0) return nullptr;
  struct stat st {};
  void* map = MAP_FAILED;
  if (fstat(fd, &st) == 0 && static_cast<std::size_t>(st.st_size) == Layout::total(ring))
    map = mmap(nullptr, Layout::total(ring), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (map == MAP_FAILED) return nullptr;
  const auto* control = static_cast<const PairControl*>(map);
  if (control->magic != kMagic || control->nonce != nonce || control->ring_bytes != ring) {
    munmap(map, Layout::total(ring));
    return nullptr;
  }
  return map;
}

void attach(Peer& p, void* map, int side, std::uint64_t ring) {
  char* base = static_cast<char*>(map);
  p.map = map;
  p.map_bytes = Layout::total(ring);
  p.side = side;
  p.control = reinterpret_cast<PairControl*>(base + Layout::control);
  auto* counters = reinterpret_cast<shm::RingCounters*>(base + Layout::counters);
  char* data = base + Layout::data;
  // Ring 0 carries the lower rank's messages, ring 1 the higher's.
  p.out = shm::Ring(&counters[side], data + side * ring, ring);
  p.in = shm::Ring(&counters[1 - side], data + (1 - side) * ring, ring);
}

}  // namespace

ShmChannel::ShmChannel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

std::uint64_t ShmChannel::ring_bytes(std::size_t local_peers) {
  // 1 MiB holds a U-Net's halo rows and the direct collectives at once (a
  // longer message streams through); smaller only so that a rank's rings
  // stay within 32 MiB per group.
  std::uint64_t ring = std::uint64_t{1} << 20;
  while (ring > (std::uint64_t{64} << 10) && local_peers * 2 * ring > (std::uint64_t{32} << 20))
    ring /= 2;
  return ring;
}

ShmChannel::~ShmChannel() = default;

std::vector<std::string> ShmChannel::hosts(StoreAdapter& store, int rank, int size, bool enabled) {
  std::vector<std::string> all(static_cast<std::size_t>(size));
  all[static_cast<std::size_t>(rank)] = host_key(enabled);
  store.set("shm/host/" + std::to_string(rank), bytes(all[static_cast<std::size_t>(rank)]));
  for (int peer = 0; peer < size; ++peer)
    if (peer != rank)
      all[static_cast<std::size_t>(peer)] = text(store.get("shm/host/" + std::to_string(peer)));
  return all;
}

std::shared_ptr<ShmChannel> ShmChannel::connect(StoreAdapter& store, int rank,
                                                const std::vector<std::string>& hosts) {
  const int size = static_cast<int>(hosts.size());
  const std::string& mine = hosts[static_cast<std::size_t>(rank)];
  std::vector<int> local;
  for (int peer = 0; peer < size; ++peer)
    if (peer != rank && mine != kNoHost && hosts[static_cast<std::size_t>(peer)] == mine)
      local.push_back(peer);
  const std::uint64_t ring = ring_bytes(local.size());
  auto impl = std::make_unique<Impl>();
  impl->index.assign(static_cast<std::size_t>(size), -1);
  const cpu_budget::Budget cpus = cpu_budget::read_budget();
  impl->spin = detail::wait_spin(config(), static_cast<int>(local.size()) + 1, cpus);
  const auto pair_key = [&](const char* what, int a, int b) {
    return fmt::format("shm/{}/{}-{}", what, std::min(a, b), std::max(a, b));
  };
  // 1. The lower rank of each pair creates its segment and publishes where.
  std::unordered_map<int, std::pair<std::string, void*>> created;
  for (int peer : local) {
    if (peer < rank) continue;
    const std::string name = fmt::format("/dtensor-{:016x}{:016x}", random64(), random64());
    const std::uint64_t nonce = random64();
    void* map = create_segment(name, Layout::total(ring));
    if (map != nullptr) {
      auto* control = new (map) PairControl{};
      control->magic = kMagic;
      control->nonce = nonce;
      control->ring_bytes = ring;
      control->pid[0] = getpid();
      new (static_cast<char*>(map) + Layout::counters) shm::RingCounters[2]{};
      created[peer] = {name, map};
    }
    store.set(pair_key("segment", rank, peer),
              bytes(map == nullptr ? std::string("-") : fmt::format("{}:{:x}", name, nonce)));
  }
  // 2. The higher rank maps it and says whether that worked.
  std::vector<std::pair<int, void*>> usable;
  for (int peer : local) {
    if (peer > rank) continue;
    const std::string where = text(store.get(pair_key("segment", rank, peer)));
    void* map = nullptr;
    if (const auto colon = where.rfind(':'); where != "-" && colon != std::string::npos)
      map = open_segment(where.substr(0, colon), std::stoull(where.substr(colon + 1), nullptr, 16),
                         ring);
    if (map != nullptr) static_cast<PairControl*>(map)->pid[1] = getpid();
    store.set(pair_key("mapped", rank, peer), bytes(map != nullptr ? "1" : "0"));
    if (map != nullptr) usable.emplace_back(peer, map);
  }
  // 3. The creator removes the name (the mappings stay) and keeps the pair
  //    only if the peer mapped it.
  for (auto& [peer, made] : created) {
    const bool mapped = text(store.get(pair_key("mapped", rank, peer))) == "1";
    shm_unlink(made.first.c_str());
    if (mapped)
      usable.emplace_back(peer, made.second);
    else
      munmap(made.second, Layout::total(ring));
  }
  if (usable.empty()) return nullptr;
  std::sort(usable.begin(), usable.end());
  impl->peers.resize(usable.size());
  for (std::size_t i = 0; i < usable.size(); ++i) {
    Peer& p = impl->peers[i];
    p.rank = usable[i].first;
    attach(p, usable[i].second, rank < p.rank ? 0 : 1, ring);
    impl->index[static_cast<std::size_t>(p.rank)] = static_cast<int>(i);
  }
  log::debug(
      "gloo: rank {} reaches {} peer(s) through shared memory ({} KiB rings, waits "
      "spin {} us; CPUs: {} its own, {} for the host's ranks{})",
      rank, usable.size(), ring >> 10, impl->spin.count(), cpus.own(), cpus.host(),
      cpus.quota ? fmt::format(", a quota of {:.2f}", *cpus.quota) : std::string());
  return std::shared_ptr<ShmChannel>(new ShmChannel(std::move(impl)));
}

bool ShmChannel::one_host(const std::vector<std::string>& hosts) {
  return std::all_of(hosts.begin(), hosts.end(),
                     [&](const std::string& h) { return h != kNoHost && h == hosts[0]; });
}

bool ShmChannel::reaches(int peer) const {
  return impl_->find(peer) != nullptr;
}

std::shared_ptr<Work> ShmChannel::post(bool is_send, const Tensor& t, int peer, std::uint64_t slot,
                                       const P2PName& what,
                                       std::shared_ptr<GlooProcessGroup> group) {
  auto op = std::make_shared<Op>();
  op->is_send = is_send;
  op->peer = peer;
  op->slot = slot;
  op->storage = t.storage();
  op->data = static_cast<char*>(t.data_ptr());
  op->nbytes = static_cast<std::uint64_t>(t.nbytes());
  Peer& p = *impl_->find(peer);
  {
    std::lock_guard lock(impl_->mutex);
    // A send to a peer that closed fails at once (only the flag here: a read
    // of /proc per message would cost; a peer that died is found by the
    // waits). A receive may still find its message in the ring.
    if (is_send && p.control->closed[p.other()].load(std::memory_order_acquire) != 0)
      finish(*op, connection_failed(closed_by(p)));
    else if (is_send)
      p.sends.push_back(op);
    else
      impl_->post_receive(p, op);
    impl_->progress();  // a send that fits leaves now
  }
  return std::make_shared<ShmWork>(shared_from_this(), *impl_, std::move(op), what,
                                   std::move(group));
}

void ShmChannel::close() {
  for (auto& p : impl_->peers) {
    p.control->closed[p.side].store(1, std::memory_order_release);
    p.ring_other();
  }
  impl_->aborted.store(true, std::memory_order_release);
  impl_->wake_own();
}

}  // namespace dtensor::gloo_backend
