#include "backends/mpi/mpi_process_group.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <numeric>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "backends/mpi/mpi_runtime.h"
#include "backends/mpi/mpi_types.h"
#include "backends/mpi/mpi_wait.h"
#include "backends/mpi/mpi_work.h"
#include "core/detail/reduce_kernels.h"
#include "core/detail/split_plan.h"
#include "dtensor/core/errors.h"
#include "dtensor/core/logging.h"

namespace dtensor::mpi_backend {
namespace {

std::int64_t sum(const std::vector<std::int64_t>& v) {
  return std::accumulate(v.begin(), v.end(), std::int64_t{0});
}

// MPI counts and displacements are ints (of elements).
std::vector<int> to_int_counts(const std::vector<std::int64_t>& counts, const char* param,
                               const char* op) {
  if (sum(counts) > INT_MAX)
    throw NotSupported("mpi", fmt::format("{}: {} add up to {} elements, more than MPI's int "
                                          "counts hold ({})",
                                          op, param, sum(counts), INT_MAX));
  return std::vector<int>(counts.begin(), counts.end());
}

std::vector<int> displacements(const std::vector<int>& counts) {
  std::vector<int> d(counts.size(), 0);
  for (std::size_t i = 1; i < counts.size(); ++i)
    d[i] = d[i - 1] + counts[i - 1];
  return d;
}

int element_count(const Tensor& t, const char* op) {
  if (t.numel() > INT_MAX)
    throw NotSupported("mpi", fmt::format("{}: {} elements are more than MPI's int counts hold "
                                          "({})",
                                          op, t.numel(), INT_MAX));
  return static_cast<int>(t.numel());
}

void copy_bytes(const Tensor& dst, const Tensor& src) {
  if (src.nbytes() > 0 && dst.data_ptr() != src.data_ptr())
    std::memcpy(dst.data_ptr(), src.data_ptr(), src.nbytes());
}

}  // namespace

MpiProcessGroup::MpiProcessGroup(MPI_Comm comm, std::vector<int> global_ranks,
                                 std::chrono::milliseconds timeout)
    : comm_(comm),
      rank_([&] {
        int r = 0;
        MPI_Comm_rank(comm, &r);
        return r;
      }()),
      size_(static_cast<int>(global_ranks.size())),
      global_ranks_(std::move(global_ranks)),
      timeout_(timeout) {
  int* ub = nullptr;
  int found = 0;
  MPI_Comm_get_attr(comm_, MPI_TAG_UB, &ub, &found);
  if (found && ub) tag_ub_ = *ub;
}

MpiProcessGroup::~MpiProcessGroup() {
  // A broken group's communicator may still have operations pending: it is
  // left to MPI_Abort. After MPI_Finalize (a group outliving main) nothing is
  // freed either.
  std::lock_guard lock(mutex_);
  if (!failure_.empty() || !parked_.empty()) return;
  auto mpi = mpi_lock();
  if (mpi_usable()) MPI_Comm_free(&comm_);
}

std::shared_ptr<MpiProcessGroup> MpiProcessGroup::create_world(const BackendInit& init) {
  ensure_mpi_initialized();
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0, size = 0;
  {
    auto lock = mpi_lock();
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
  }
  // Said before the collective below, alike on every rank that was told otherwise.
  check_arg(init.world_size < 0 || init.world_size == size, "mpi",
            "world_size={} but MPI started {} processes", init.world_size, size);
  check_arg(init.rank < 0 || init.rank == rank, "mpi", "rank={} but MPI says this is rank {}",
            init.rank, rank);
  {
    auto lock = mpi_lock();
    check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &comm), "creating the world group (MPI_Comm_dup)");
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  }
  std::vector<int> world(static_cast<std::size_t>(size));
  std::iota(world.begin(), world.end(), 0);
  int provided = 0;
  MPI_Query_thread(&provided);
  log::debug("mpi: rank {}/{} world group ready (thread level {})", rank, size,
             thread_level_name(provided));
  return std::shared_ptr<MpiProcessGroup>(
      new MpiProcessGroup(comm, std::move(world), init.timeout));
}

void MpiProcessGroup::check_usable(const std::string& op) const {
  std::lock_guard lock(mutex_);
  if (!failure_.empty())
    throw CommError("mpi", op + ": the group is unusable after an earlier failure: " + failure_);
}

void MpiProcessGroup::fail(const std::string& reason) {
  {
    std::lock_guard lock(mutex_);
    if (!failure_.empty()) return;
    failure_ = reason;
  }
  record_job_failure(reason, timeout_);
  log::debug("mpi: group broken: {}", reason);
}

void MpiProcessGroup::park_unfinished(MPI_Request request, Tensor tensor) {
  std::lock_guard lock(mutex_);
  parked_.push_back({request, {std::move(tensor)}});
}

template <typename Post>
void MpiProcessGroup::run_collective(const std::string& op, std::vector<Tensor> keep, Post&& post) {
  check_usable(op);
  MPI_Request request = MPI_REQUEST_NULL;
  try {
    {
      auto lock = mpi_lock();
      check_mpi(post(&request), op);
    }
    if (!wait_bounded(request, timeout_, op)) throw_timeout(op, timeout_);
  } catch (const CommError& e) {
    if (request != MPI_REQUEST_NULL) {
      std::lock_guard lock(mutex_);
      parked_.push_back({request, std::move(keep)});
    }
    fail(e.what());
    throw;
  }
}

int MpiProcessGroup::mpi_tag(int tag) const {
  // The top tag is the handshake's. MPI guarantees tags up to 32767 only;
  // OpenMPI's are wider. A larger tag is folded: two exchanges in flight
  // between the same two ranks would have to differ by a multiple of the
  // bound to meet.
  return tag < tag_ub_ ? tag : tag % tag_ub_;
}

// ---- point to point ----

std::shared_ptr<Work> MpiProcessGroup::isend(const Tensor& t, int dst, int tag) {
  return post_p2p(true, t, dst, tag);
}

std::shared_ptr<Work> MpiProcessGroup::irecv(const Tensor& t, int src, int tag) {
  return post_p2p(false, t, src, tag);
}

std::shared_ptr<Work> MpiProcessGroup::post_p2p(bool is_send, const Tensor& t, int peer, int tag) {
  const char* op = is_send ? "isend" : "irecv";
  // The validating layer checked the arguments and keeps messages to this rank.
  if (t.nbytes() > static_cast<std::size_t>(INT_MAX))
    throw NotSupported(
        "mpi", fmt::format("{}: {} bytes are more than MPI's int counts hold", op, t.nbytes()));
  // The same description as Gloo's, so that messages read alike.
  std::string what = fmt::format("{} rank {}", is_send ? "send to" : "recv from", peer);
  if (global_ranks_[peer] != peer) what += fmt::format(" (world rank {})", global_ranks_[peer]);
  what += fmt::format(" tag {}", tag);
  check_usable(what);
  MPI_Request request = MPI_REQUEST_NULL;
  const int bytes = static_cast<int>(t.nbytes());
  try {
    auto lock = mpi_lock();
    // Bytes: the receiver checks the length it got (MpiP2PWork::wait).
    check_mpi(is_send
                  ? MPI_Isend(t.data_ptr(), bytes, MPI_BYTE, peer, mpi_tag(tag), comm_, &request)
                  : MPI_Irecv(t.data_ptr(), bytes, MPI_BYTE, peer, mpi_tag(tag), comm_, &request),
              what);
  } catch (const CommError& e) {
    fail(e.what());
    throw;
  }
  if (is_send) {
    counters_.bytes_sent += t.nbytes();
    counters_.messages_sent += 1;
  }
  return std::make_shared<MpiP2PWork>(shared_from_this(), is_send, t, request, std::move(what));
}

// ---- collectives ----

void MpiProcessGroup::allreduce(Tensor& t, ReduceOp op) {
  const int n = element_count(t, "allreduce");
  if (size_ == 1 || n == 0) return;  // the reduction of one contribution is itself (Avg too)
  run_collective(
      fmt::format("allreduce({}, {} x {})", reduce_op_name(op), n, dtype_name(t.dtype())), {t},
      [&](MPI_Request* r) {
        return MPI_Iallreduce(MPI_IN_PLACE, t.data_ptr(), n, mpi_datatype(t.dtype()),
                              mpi_op(op, t.dtype()), comm_, r);
      });
  if (op == ReduceOp::Avg)
    visit_dtype(t.dtype(), [&](auto tag) {
      using T = decltype(tag);
      detail::divide_in_place<T>(t.data<T>(), static_cast<std::size_t>(n), size_);
    });
  // Payload, not wire bytes: MPI chooses its own algorithm.
  counters_.bytes_sent += t.nbytes();
  counters_.bytes_received += t.nbytes();
  counters_.messages_sent += 1;
}

void MpiProcessGroup::broadcast(Tensor& t, int root) {
  if (size_ == 1 || t.nbytes() == 0) return;
  const int n = element_count(t, "broadcast");
  run_collective(fmt::format("broadcast(root {}, {} bytes)", root, t.nbytes()), {t},
                 [&](MPI_Request* r) {
                   return MPI_Ibcast(t.data_ptr(), n, mpi_datatype(t.dtype()), root, comm_, r);
                 });
  if (rank_ == root) {
    counters_.bytes_sent += t.nbytes();
    counters_.messages_sent += 1;
  } else {
    counters_.bytes_received += t.nbytes();
  }
}

void MpiProcessGroup::allgather(const Tensor& in, Tensor& out,
                                const std::vector<std::int64_t>& counts) {
  if (size_ == 1) {
    copy_bytes(out, in);
    return;
  }
  if (out.nbytes() == 0) return;  // every rank knows the counts: all skip alike
  const std::vector<int> c = to_int_counts(counts, "counts", "allgather");
  const std::vector<int> d = displacements(c);
  const MPI_Datatype type = mpi_datatype(in.dtype());
  // When `in` already sits at its place in `out`, MPI needs no input.
  const char* my_place = static_cast<const char*>(out.data_ptr()) +
                         static_cast<std::size_t>(d[rank_]) * dtype_size(in.dtype());
  const bool in_place = in.data_ptr() == my_place;
  run_collective(fmt::format("allgather({} x {})", out.numel(), dtype_name(out.dtype())), {in, out},
                 [&](MPI_Request* r) {
                   return MPI_Iallgatherv(in_place ? MPI_IN_PLACE : in.data_ptr(), c[rank_], type,
                                          out.data_ptr(), c.data(), d.data(), type, comm_, r);
                 });
  counters_.bytes_sent += in.nbytes() * static_cast<std::uint64_t>(size_ - 1);
  counters_.bytes_received += out.nbytes() - in.nbytes();
  counters_.messages_sent += static_cast<std::uint64_t>(size_ - 1);
}

void MpiProcessGroup::reduce_scatter(const Tensor& in, Tensor& out,
                                     const std::vector<std::int64_t>& counts, ReduceOp op) {
  if (size_ == 1) {
    copy_bytes(out, in);
    return;
  }
  if (in.nbytes() == 0) return;
  // As under Gloo: an all-to-all moves block q to rank q, then each rank
  // reduces its blocks in rank order, so both backends give the same bits.
  const std::int64_t mine = counts[rank_];
  Tensor gathered = Tensor::empty({mine * size_}, in.dtype());
  const std::vector<int> sc = to_int_counts(counts, "counts", "reduce_scatter");
  const std::vector<int> rc =
      to_int_counts(std::vector<std::int64_t>(size_, mine), "counts", "reduce_scatter");
  const std::vector<int> sd = displacements(sc), rd = displacements(rc);
  const MPI_Datatype type = mpi_datatype(in.dtype());
  run_collective(fmt::format("reduce_scatter({}, {} x {})", reduce_op_name(op), in.numel(),
                             dtype_name(in.dtype())),
                 {in, gathered}, [&](MPI_Request* r) {
                   return MPI_Ialltoallv(in.data_ptr(), sc.data(), sd.data(), type,
                                         gathered.data_ptr(), rc.data(), rd.data(), type, comm_, r);
                 });
  visit_dtype(in.dtype(), [&](auto tag) {
    using T = decltype(tag);
    detail::reduce_blocks<T>(op, gathered.data<T>(), static_cast<std::size_t>(size_),
                             static_cast<std::size_t>(mine), static_cast<std::size_t>(mine),
                             out.data<T>());
  });
  const std::uint64_t elem = dtype_size(in.dtype());
  counters_.bytes_sent += (static_cast<std::uint64_t>(in.numel() - mine)) * elem;
  counters_.bytes_received += static_cast<std::uint64_t>(mine * (size_ - 1)) * elem;
  counters_.messages_sent += static_cast<std::uint64_t>(size_ - 1);
}

void MpiProcessGroup::all_to_all(const Tensor& in, const std::vector<std::int64_t>& send_counts,
                                 Tensor& out, const std::vector<std::int64_t>& recv_counts) {
  if (size_ == 1) {
    copy_bytes(out, in);
    return;
  }
  // No early exit on empty buffers: only this rank knows its counts.
  const std::vector<int> sc = to_int_counts(send_counts, "send_counts", "all_to_all");
  const std::vector<int> rc = to_int_counts(recv_counts, "recv_counts", "all_to_all");
  const std::vector<int> sd = displacements(sc), rd = displacements(rc);
  const MPI_Datatype type = mpi_datatype(in.dtype());
  run_collective(
      fmt::format("all_to_all({} -> {} x {})", in.numel(), out.numel(), dtype_name(in.dtype())),
      {in, out}, [&](MPI_Request* r) {
        return MPI_Ialltoallv(in.data_ptr(), sc.data(), sd.data(), type, out.data_ptr(), rc.data(),
                              rd.data(), type, comm_, r);
      });
  const std::uint64_t elem = dtype_size(in.dtype());
  counters_.bytes_sent += static_cast<std::uint64_t>(in.numel() - send_counts[rank_]) * elem;
  counters_.bytes_received += static_cast<std::uint64_t>(out.numel() - recv_counts[rank_]) * elem;
  counters_.messages_sent += static_cast<std::uint64_t>(size_ - 1);
}

void MpiProcessGroup::barrier() {
  if (size_ == 1) return;
  run_collective("barrier", {}, [&](MPI_Request* r) { return MPI_Ibarrier(comm_, r); });
}

// ---- subgroups ----

void MpiProcessGroup::handshake(const std::vector<int>& ranks, const std::string& op) {
  // Communicator creation blocks without a timeout; this bounded exchange
  // first makes sure every member is there. Its buffers are tensors so that,
  // on a timeout, they stay parked with the pending requests.
  const auto n = static_cast<std::int64_t>(ranks.size());
  Tensor inbox = Tensor::zeros({n}, DType::F32);
  Tensor token = Tensor::full({1}, 1.0, DType::F32);
  std::vector<MPI_Request> requests;
  {
    auto lock = mpi_lock();
    for (std::size_t i = 0; i < ranks.size(); ++i) {
      if (ranks[i] == rank_) continue;
      requests.emplace_back();
      check_mpi(MPI_Irecv(inbox.data<float>() + i, 1, MPI_FLOAT, ranks[i], tag_ub_, comm_,
                          &requests.back()),
                op);
      requests.emplace_back();
      check_mpi(
          MPI_Isend(token.data_ptr(), 1, MPI_FLOAT, ranks[i], tag_ub_, comm_, &requests.back()),
          op);
    }
  }
  std::size_t done = 0;
  try {
    for (; done < requests.size(); ++done)
      if (!wait_bounded(requests[done], timeout_, op)) throw_timeout(op, timeout_);
  } catch (const CommError& e) {
    {
      std::lock_guard lock(mutex_);
      for (std::size_t k = done; k < requests.size(); ++k)
        if (requests[k] != MPI_REQUEST_NULL) parked_.push_back({requests[k], {inbox, token}});
    }
    fail(e.what());
    throw;
  }
}

std::shared_ptr<MpiProcessGroup> MpiProcessGroup::adopt(MPI_Comm comm,
                                                        const std::vector<int>& ranks) {
  std::vector<int> global;
  for (int r : ranks)
    global.push_back(global_ranks_[r]);
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  return std::shared_ptr<MpiProcessGroup>(new MpiProcessGroup(comm, std::move(global), timeout_));
}

std::shared_ptr<ProcessGroup> MpiProcessGroup::new_subgroup(const std::vector<int>& ranks) {
  // The validating layer checked `ranks` (validating_process_group.h).
  const std::string op = fmt::format("new_subgroup([{}])", fmt::join(ranks, ", "));
  check_usable(op);
  handshake(ranks, op);
  MPI_Comm comm = MPI_COMM_NULL;
  {
    auto lock = mpi_lock();
    MPI_Group all = MPI_GROUP_NULL, members = MPI_GROUP_NULL;
    MPI_Comm_group(comm_, &all);
    MPI_Group_incl(all, static_cast<int>(ranks.size()), ranks.data(), &members);
    const int rc = MPI_Comm_create_group(comm_, members, tag_ub_, &comm);
    MPI_Group_free(&members);
    MPI_Group_free(&all);
    check_mpi(rc, op);
  }
  return adopt(comm, ranks);
}

std::shared_ptr<ProcessGroup> MpiProcessGroup::split_groups(
    const std::vector<std::vector<int>>& groups) {
  const detail::SplitMembership m = detail::split_membership(groups, rank_, size_);
  const std::string op = fmt::format("split_groups({} groups)", groups.size());
  check_usable(op);
  // MPI_Comm_split has no timeout: a bounded barrier first.
  run_collective(op, {}, [&](MPI_Request* r) { return MPI_Ibarrier(comm_, r); });
  MPI_Comm comm = MPI_COMM_NULL;
  {
    auto lock = mpi_lock();
    // Ranks keep their order inside each group (the lists are increasing).
    check_mpi(MPI_Comm_split(comm_, m.group < 0 ? MPI_UNDEFINED : m.group, rank_, &comm), op);
  }
  if (m.group < 0) return nullptr;
  return adopt(comm, groups[static_cast<std::size_t>(m.group)]);
}

}  // namespace dtensor::mpi_backend
