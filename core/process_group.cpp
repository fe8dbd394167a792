#include "dtensor/core/process_group.h"

#include <exception>

#include "core/detail/split_plan.h"

namespace dtensor {

std::string_view reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return "sum";
    case ReduceOp::Avg:
      return "avg";
    case ReduceOp::Max:
      return "max";
    case ReduceOp::Min:
      return "min";
  }
  return "?";
}

void wait_all(std::vector<std::shared_ptr<Work>>& works, std::chrono::milliseconds timeout) {
  std::exception_ptr first;
  for (auto& w : works) {
    try {
      if (w) w->wait(timeout);
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

std::vector<std::shared_ptr<Work>> ProcessGroup::batch_isend_irecv(const std::vector<P2POp>& ops) {
  // Receives are posted before sends so that a peer's send always finds a
  // matching buffer, whatever order the caller listed the operations in.
  std::vector<std::shared_ptr<Work>> works(ops.size());
  for (std::size_t i = 0; i < ops.size(); ++i)
    if (ops[i].kind == P2POp::Kind::Recv) works[i] = irecv(ops[i].tensor, ops[i].peer, ops[i].tag);
  for (std::size_t i = 0; i < ops.size(); ++i)
    if (ops[i].kind == P2POp::Kind::Send) works[i] = isend(ops[i].tensor, ops[i].peer, ops[i].tag);
  return works;
}

void ProcessGroup::abort(const std::string&) {}

bool ProcessGroup::matches_by_tag(DeviceType) const {
  return false;
}

bool ProcessGroup::accepts_device(Device device) const {
  return device.is_cpu();
}

double ProcessGroup::message_seconds() const {
  return 40e-6;
}

std::shared_ptr<ProcessGroup> ProcessGroup::split_groups(
    const std::vector<std::vector<int>>& groups) {
  const detail::SplitMembership m = detail::split_membership(groups, rank(), size());
  if (m.group < 0) return nullptr;
  return new_subgroup(groups[static_cast<std::size_t>(m.group)]);
}

}  // namespace dtensor
