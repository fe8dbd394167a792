#include "dtensor/placement/bucketed_reduce.h"

#include <map>

#include "dtensor/core/errors.h"
#include "dtensor/placement/redistribute.h"

namespace dtensor {
namespace {

Placements target_of(const Placements& p) {
  Placements t = p;
  for (auto& x : t)
    if (x.is_partial() && x.reduce_op() == ReduceOp::Sum) x = Replicate();
  return t;
}

// One bucket: tensors (by index) sharing mesh, dtype and placements.
struct Bucket {
  std::vector<std::size_t> members;
  std::size_t bytes = 0;
};

void reduce_bucket(const std::vector<DTensor>& in, const Bucket& b, std::vector<DTensor>& out) {
  const DTensor& first = in[b.members[0]];
  const DTensorSpec& spec = first.spec();
  std::int64_t total = 0;
  for (auto i : b.members)
    total += in[i].to_local().numel();
  Tensor flat = Tensor::empty({total}, first.dtype(), first.to_local().device());
  std::int64_t at = 0;
  for (auto i : b.members) {
    const Tensor& l = in[i].to_local();
    flat.narrow(0, at, l.numel()).view(l.shape()).copy_(l);
    at += l.numel();
  }
  for (std::int64_t m = 0; m < spec.mesh().ndim(); ++m) {
    const Placement& p = spec.placements()[m];
    if (p.is_partial() && p.reduce_op() == ReduceOp::Sum) spec.mesh().get_group(m)->allreduce(flat);
  }
  at = 0;
  const Placements target = target_of(spec.placements());
  for (auto i : b.members) {
    const Tensor& l = in[i].to_local();
    out[i] = DTensor(flat.narrow(0, at, l.numel()).view(l.shape()).clone(),
                     DTensorSpec(spec.mesh(), target, in[i].shape(), in[i].dtype()));
    at += l.numel();
  }
}

}  // namespace

std::vector<DTensor> reduce_partials(const std::vector<DTensor>& tensors,
                                     std::size_t bucket_bytes) {
  std::vector<DTensor> out(tensors);
  if (tensors.empty()) return out;
  // Every rank sees the same list, so the buckets (and the collectives) are
  // formed in the same order everywhere; one agreement check covers them all.
  std::size_t fingerprint = tensors.size();
  std::string description;
  for (const auto& t : tensors) {
    fingerprint = fingerprint * 1000003u ^ t.spec().hash();
    description += t.spec().str() + ";";
  }
  check_ranks_agree(*tensors[0].mesh().get_mesh_group(), fingerprint, "reduce_partials",
                    description);
  std::vector<Bucket> buckets;
  std::map<std::size_t, std::size_t> open;  // key -> index of the bucket being filled
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const DTensorSpec& s = tensors[i].spec();
    if (target_of(s.placements()) == s.placements()) continue;  // nothing pending
    DTENSOR_CHECK_ARG(s.mesh() == tensors[0].mesh(), "reduce_partials",
                      "tensors: all must live on one mesh ({} vs {})", s.mesh().str(),
                      tensors[0].mesh().str());
    const std::size_t key = s.mesh().hash() * 31 + static_cast<std::size_t>(s.dtype()) * 7 +
                            std::hash<std::string>()(placements_str(s.placements()));
    const std::size_t bytes = tensors[i].to_local().nbytes();
    auto it = open.find(key);
    if (it == open.end() || buckets[it->second].bytes + bytes > bucket_bytes) {
      buckets.push_back({});
      open[key] = buckets.size() - 1;
      it = open.find(key);
    }
    buckets[it->second].members.push_back(i);
    buckets[it->second].bytes += bytes;
  }
  for (const auto& b : buckets)
    reduce_bucket(tensors, b, out);
  return out;
}

}  // namespace dtensor
