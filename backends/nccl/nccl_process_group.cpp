#include "backends/nccl/nccl_process_group.h"

#include <algorithm>

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstring>

#include <fmt/format.h>

#include "backends/cuda/cuda_context.h"
#include "backends/cuda/cuda_errors.h"
#include "backends/nccl/collective_plan.h"
#include "backends/nccl/nccl_types.h"
#include "backends/nccl/watchdog.h"
#include "dtensor/core/errors.h"
#include "dtensor/core/logging.h"

namespace dtensor::nccl_backend {
namespace {

using cuda_backend::check_cuda;
using cuda_backend::DeviceGuard;
using cuda_backend::stream_for;

std::atomic<int> g_world_generation{0};

char* at(const Tensor& t, std::int64_t elements) {
  return static_cast<char*>(t.data_ptr()) +
         elements * static_cast<std::int64_t>(dtype_size(t.dtype()));
}

// Completion of work enqueued on the stream: an event, polled by the watchdog
// together with the communicator's asynchronous error.
class NcclWork final : public Work {
 public:
  NcclWork(std::shared_ptr<Comm> comm, cudaEvent_t ev, std::string what, std::vector<Tensor> keep)
      : comm_(std::move(comm)), ev_(ev), what_(std::move(what)), keep_(std::move(keep)) {}
  ~NcclWork() override { cudaEventDestroy(ev_); }

  void wait(std::chrono::milliseconds timeout) override {
    if (done_) return;
    const auto limit = timeout.count() < 0 ? comm_->timeout : timeout;
    watch(
        what_,
        [&] {
          const cudaError_t e = cudaEventQuery(ev_);
          if (e == cudaSuccess) return Poll{PollStatus::Done, {}};
          if (e != cudaErrorNotReady) {
            cudaGetLastError();
            return Poll{PollStatus::Failed, cudaGetErrorString(e)};
          }
          // Not done on the GPU: done only when the event is; failed when the
          // communicator is (an abort included).
          Poll state = comm_->poll_state();
          if (state.status == PollStatus::Failed) return state;
          return Poll{PollStatus::Pending, {}};
        },
        [&] { comm_->abort(what_ + " timed out or failed"); }, limit);
    done_ = true;
    keep_.clear();
  }

 private:
  std::shared_ptr<Comm> comm_;
  cudaEvent_t ev_;
  std::string what_;
  std::vector<Tensor> keep_;
  bool done_ = false;
};

}  // namespace

void Comm::abort(const std::string& reason) {
  std::lock_guard lock(mu);
  if (aborted || !comm) return;
  aborted = true;
  abort_reason = reason;
  log::error("nccl: aborting the communicator: {}", reason);
  ncclCommAbort(comm);
}

Poll Comm::poll_state() {
  std::lock_guard lock(mu);
  if (aborted) return Poll{PollStatus::Failed, "the communicator was aborted: " + abort_reason};
  ncclResult_t r = ncclSuccess;
  ncclCommGetAsyncError(comm, &r);
  if (r == ncclInProgress) return Poll{PollStatus::Pending, {}};
  if (r != ncclSuccess) return Poll{PollStatus::Failed, ncclGetErrorString(r)};
  return Poll{PollStatus::Done, {}};
}

void Comm::settle(const std::string& what) {
  watch(
      what, [&] { return poll_state(); }, [&] { abort(what + " did not complete"); }, timeout);
}

void Comm::throw_if_aborted(const std::string& what) const {
  if (aborted)
    throw CommError(
        "nccl", fmt::format("{}: the communicator was aborted earlier ({})", what, abort_reason));
}

std::shared_ptr<ProcessGroup> NcclProcessGroup::create_world(const BackendInit& init) {
  std::vector<int> ranks(static_cast<std::size_t>(init.world_size));
  for (int i = 0; i < init.world_size; ++i)
    ranks[static_cast<std::size_t>(i)] = i;
  // The GPU this rank uses: picked from its local rank (cuda_context.h).
  const int device = cuda_backend::default_device();
  const std::string prefix = "dtensor.nccl/world" + std::to_string(g_world_generation++);
  return std::make_shared<NcclProcessGroup>(init.rank, init.world_size, std::move(ranks),
                                            init.store, prefix, init.timeout, device);
}

NcclProcessGroup::NcclProcessGroup(int rank, int size, std::vector<int> global_ranks,
                                   std::shared_ptr<Store> store, std::string prefix,
                                   std::chrono::milliseconds timeout, int device)
    : rank_(rank),
      size_(size),
      global_ranks_(std::move(global_ranks)),
      store_(std::move(store)),
      prefix_(std::move(prefix)),
      comm_(std::make_shared<Comm>()) {
  comm_->device = device;
  comm_->timeout = timeout;
  connect();
}

NcclProcessGroup::NcclProcessGroup(int rank, int size, std::vector<int> global_ranks,
                                   std::shared_ptr<Store> store, std::string prefix,
                                   std::shared_ptr<Comm> comm)
    : rank_(rank),
      size_(size),
      global_ranks_(std::move(global_ranks)),
      store_(std::move(store)),
      prefix_(std::move(prefix)),
      comm_(std::move(comm)) {}

NcclProcessGroup::~NcclProcessGroup() {
  if (!comm_->comm) return;
  try {
    DeviceGuard guard(comm_->device);
    std::lock_guard lock(comm_->mu);
    if (comm_->aborted) return;
    // Outstanding work holds shared_ptr<Comm>, not the group: finalising here
    // is fine; a peer that never finalises is the watchdog's business.
    ncclCommFinalize(comm_->comm);
  } catch (...) {
    return;
  }
  try {
    comm_->settle("finalising " + prefix_);
    std::lock_guard lock(comm_->mu);  // not after an abort, which freed it
    if (!comm_->aborted) ncclCommDestroy(comm_->comm);
    comm_->comm = nullptr;
  } catch (const std::exception& e) {
    log::warn("nccl: {}", e.what());
  }
}

void NcclProcessGroup::connect() {
  DeviceGuard guard(comm_->device);
  ncclUniqueId id;
  const std::string key = prefix_ + "/unique_id";
  if (rank_ == 0) {
    check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
    std::vector<char> bytes(sizeof(id));
    std::memcpy(bytes.data(), &id, sizeof(id));
    store_->set(key, bytes);
  } else {
    const std::vector<char> bytes = store_->get(key);
    if (bytes.size() != sizeof(id))
      throw CommError("nccl", fmt::format("store key {} holds {} bytes, not an ncclUniqueId", key,
                                          bytes.size()));
    std::memcpy(&id, bytes.data(), sizeof(id));
  }
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // every call returns at once; the watchdog polls
  check_nccl(ncclCommInitRankConfig(&comm_->comm, size_, id, rank_, &config),
             "ncclCommInitRankConfig " + prefix_);
  comm_->settle(
      fmt::format("connecting {} as rank {}/{} on cuda:{}", prefix_, rank_, size_, comm_->device));
  log::debug("nccl: group '{}' connected on cuda:{}", prefix_, comm_->device);
}

void NcclProcessGroup::abort(const std::string& reason) {
  comm_->abort(reason);
}

bool NcclProcessGroup::accepts_device(Device device) const {
  return device == Device::cuda(comm_->device);
}

template <typename F>
std::shared_ptr<Work> NcclProcessGroup::launch(const std::string& what, bool grouped, F&& issue,
                                               std::vector<Tensor> keep) {
  DeviceGuard guard(comm_->device);
  cudaStream_t s = stream_for(comm_->device);
  // Under the lock: an abort from the monitor's thread cannot free the
  // communicator while the calls are being enqueued.
  comm_->use(what, [&] {
    if (grouped) check_nccl(ncclGroupStart(), what + " (ncclGroupStart)");
    try {
      issue(s);
    } catch (...) {
      if (grouped) ncclGroupEnd();
      throw;
    }
    if (grouped) check_nccl(ncclGroupEnd(), what + " (ncclGroupEnd)");
  });
  comm_->settle(what);
  cudaEvent_t ev = nullptr;
  check_cuda(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cudaEventCreate");
  check_cuda(cudaEventRecord(ev, s), "cudaEventRecord");
  return std::make_shared<NcclWork>(comm_, ev, what, std::move(keep));
}

std::shared_ptr<Work> NcclProcessGroup::isend(const Tensor& t, int dst, int /*tag*/) {
  counters_.bytes_sent += t.nbytes();
  counters_.messages_sent += 1;
  return launch(fmt::format("isend to {}", dst), false,
                [&](cudaStream_t s) {
                  check_nccl(ncclSend(t.data_ptr(), static_cast<std::size_t>(t.numel()),
                                      nccl_dtype(t.dtype()), dst, comm_->comm, s),
                             "ncclSend");
                },
                {t});
}

std::shared_ptr<Work> NcclProcessGroup::irecv(const Tensor& t, int src, int /*tag*/) {
  counters_.bytes_received += t.nbytes();
  return launch(fmt::format("irecv from {}", src), false,
                [&](cudaStream_t s) {
                  check_nccl(ncclRecv(t.data_ptr(), static_cast<std::size_t>(t.numel()),
                                      nccl_dtype(t.dtype()), src, comm_->comm, s),
                             "ncclRecv");
                },
                {t});
}

std::vector<std::shared_ptr<Work>> NcclProcessGroup::batch_isend_irecv(
    const std::vector<P2POp>& ops) {
  // One NCCL group: the halo exchange's sends and receives progress together,
  // whatever their order, and complete as one.
  std::vector<Tensor> keep;
  for (const auto& op : ops) {
    keep.push_back(op.tensor);
    if (op.kind == P2POp::Kind::Send) {
      counters_.bytes_sent += op.tensor.nbytes();
      counters_.messages_sent += 1;
    } else {
      counters_.bytes_received += op.tensor.nbytes();
    }
  }
  if (ops.empty()) return {};
  auto work = launch(
      fmt::format("batch_isend_irecv of {} ops", ops.size()), true,
      [&](cudaStream_t s) {
        for (const auto& op : ops) {
          const auto n = static_cast<std::size_t>(op.tensor.numel());
          const auto dt = nccl_dtype(op.tensor.dtype());
          check_nccl(op.kind == P2POp::Kind::Send
                         ? ncclSend(op.tensor.data_ptr(), n, dt, op.peer, comm_->comm, s)
                         : ncclRecv(op.tensor.data_ptr(), n, dt, op.peer, comm_->comm, s),
                     "ncclSend/ncclRecv");
        }
      },
      std::move(keep));
  return std::vector<std::shared_ptr<Work>>(ops.size(), work);
}

void NcclProcessGroup::allreduce(Tensor& t, ReduceOp op) {
  launch("allreduce", false,
         [&](cudaStream_t s) {
           check_nccl(ncclAllReduce(t.data_ptr(), t.data_ptr(), static_cast<std::size_t>(t.numel()),
                                    nccl_dtype(t.dtype()), nccl_op(op), comm_->comm, s),
                      "ncclAllReduce");
         },
         {t})
      ->wait();
}

void NcclProcessGroup::broadcast(Tensor& t, int root) {
  launch("broadcast", false,
         [&](cudaStream_t s) {
           check_nccl(ncclBroadcast(t.data_ptr(), t.data_ptr(), static_cast<std::size_t>(t.numel()),
                                    nccl_dtype(t.dtype()), root, comm_->comm, s),
                      "ncclBroadcast");
         },
         {t})
      ->wait();
}

// Grouped point-to-point for the uneven collectives, plus the local part.
static void issue_p2p(const P2PPlan& plan, const Tensor& in, const Tensor& out, ncclComm_t comm,
                      cudaStream_t s) {
  const auto dt = nccl_dtype(in.dtype());
  for (const auto& seg : plan.sends)
    check_nccl(
        ncclSend(at(in, seg.offset), static_cast<std::size_t>(seg.count), dt, seg.peer, comm, s),
        "ncclSend");
  for (const auto& seg : plan.recvs)
    check_nccl(
        ncclRecv(at(out, seg.offset), static_cast<std::size_t>(seg.count), dt, seg.peer, comm, s),
        "ncclRecv");
  if (plan.self_count > 0)
    check_cuda(cudaMemcpyAsync(at(out, plan.self_dst), at(in, plan.self_src),
                               static_cast<std::size_t>(plan.self_count) * dtype_size(in.dtype()),
                               cudaMemcpyDeviceToDevice, s),
               "local block copy");
}

void NcclProcessGroup::allgather(const Tensor& in, Tensor& out,
                                 const std::vector<std::int64_t>& counts) {
  if (all_equal(counts)) {
    launch("allgather", false,
           [&](cudaStream_t s) {
             check_nccl(
                 ncclAllGather(in.data_ptr(), out.data_ptr(), static_cast<std::size_t>(counts[0]),
                               nccl_dtype(in.dtype()), comm_->comm, s),
                 "ncclAllGather");
           },
           {in, out})
        ->wait();
    return;
  }
  const P2PPlan plan = plan_allgather(rank_, counts);
  launch("allgather (uneven)", true,
         [&](cudaStream_t s) { issue_p2p(plan, in, out, comm_->comm, s); }, {in, out})
      ->wait();
}

void NcclProcessGroup::reduce_scatter(const Tensor& in, Tensor& out,
                                      const std::vector<std::int64_t>& counts, ReduceOp op) {
  const ReduceScatterPlan plan = plan_reduce_scatter(counts);
  const auto dt = nccl_dtype(in.dtype());
  launch("reduce_scatter", !plan.native,
         [&](cudaStream_t s) {
           if (plan.native) {
             check_nccl(ncclReduceScatter(in.data_ptr(), out.data_ptr(),
                                          static_cast<std::size_t>(plan.count), dt, nccl_op(op),
                                          comm_->comm, s),
                        "ncclReduceScatter");
             return;
           }
           for (const auto& root : plan.roots)
             if (root.count > 0)
               check_nccl(
                   ncclReduce(at(in, root.offset), root.peer == rank_ ? out.data_ptr() : nullptr,
                              static_cast<std::size_t>(root.count), dt, nccl_op(op), root.peer,
                              comm_->comm, s),
                   "ncclReduce");
         },
         {in, out})
      ->wait();
}

void NcclProcessGroup::all_to_all(const Tensor& in, const std::vector<std::int64_t>& send_counts,
                                  Tensor& out, const std::vector<std::int64_t>& recv_counts) {
  const P2PPlan plan = plan_all_to_all(rank_, send_counts, recv_counts);
  launch("all_to_all", true, [&](cudaStream_t s) { issue_p2p(plan, in, out, comm_->comm, s); },
         {in, out})
      ->wait();
}

void NcclProcessGroup::barrier() {
  Tensor one = Tensor::zeros({1}, DType::F32, Device::cuda(comm_->device));
  allreduce(one);
}

std::shared_ptr<ProcessGroup> NcclProcessGroup::new_subgroup(const std::vector<int>& ranks) {
  // The validating layer checked `ranks` (validating_process_group.h).
  const int me = static_cast<int>(std::find(ranks.begin(), ranks.end(), rank_) - ranks.begin());
  // Only members call this, in the same order, so (member list, how many groups
  // of those members this rank made before) names the same group everywhere.
  const int n = subgroups_made_[ranks]++;
  std::string members;
  std::vector<int> global;
  for (int r : ranks) {
    members += (members.empty() ? "" : "-") + std::to_string(r);
    global.push_back(global_ranks_[static_cast<std::size_t>(r)]);
  }
  if (members.size() > 64) members = fmt::format("h{:x}", std::hash<std::string>{}(members));
  return std::make_shared<NcclProcessGroup>(
      me, static_cast<int>(ranks.size()), std::move(global), store_,
      fmt::format("{}/sub.{}.{}", prefix_, members, n), comm_->timeout, comm_->device);
}

std::shared_ptr<ProcessGroup> NcclProcessGroup::split_groups(
    const std::vector<std::vector<int>>& groups) {
  const SplitArgs a = plan_split(groups, rank_, size_);  // same verdict on every rank
  // Every rank counts its splits alike (all of them call this in the same
  // order), so the child's name, the base of its own subgroups' store keys,
  // agrees across its members.
  const int n = splits_made_++;
  const std::string what =
      fmt::format("ncclCommSplit of {} (color {}, key {})", prefix_, a.color, a.key);
  DeviceGuard guard(comm_->device);
  // Non-blocking like the parent, said explicitly rather than inherited
  // (config NULL would inherit it too).
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t child = nullptr;
  comm_->use(
      what, [&] { check_nccl(ncclCommSplit(comm_->comm, a.color, a.key, &child, &config), what); });
  // ncclInProgress: the split completes asynchronously. The parent's state
  // says when this rank's part of the collective is done, the child's when the
  // new communicator is ready; both are polled under the watchdog (a peer that
  // never calls makes this time out and abort, instead of hanging).
  comm_->settle(what);
  if (a.color == SplitArgs::kNoColor) return nullptr;  // NCCL returns no communicator
  if (!child)
    throw CommError("nccl", fmt::format("{}: NCCL returned no communicator for a member", what));
  auto c = std::make_shared<Comm>();
  c->comm = child;
  c->device = comm_->device;
  c->timeout = comm_->timeout;
  c->settle(what + " (child)");
  std::vector<int> global;
  for (int r : groups[static_cast<std::size_t>(a.color)])
    global.push_back(global_ranks_[static_cast<std::size_t>(r)]);
  log::debug("nccl: group '{}' split into child {} of {} rank(s) as rank {}", prefix_, a.color,
             a.size, a.key);
  return std::shared_ptr<NcclProcessGroup>(
      new NcclProcessGroup(a.key, a.size, std::move(global), store_,
                           fmt::format("{}/split{}.{}", prefix_, n, a.color), std::move(c)));
}

}  // namespace dtensor::nccl_backend
