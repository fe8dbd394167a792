#include "dtensor/placement/bucketed_reduce.h"

#include <map>
#include <optional>
#include <vector>

#include "dtensor/core/comm_scope.h"
#include "dtensor/core/direct_allreduce.h"
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

// The mesh dims a bucket's reduction runs over: its Partial(sum) ones.
std::vector<std::int64_t> partial_dims(const DTensorSpec& spec) {
  std::vector<std::int64_t> dims;
  for (std::int64_t m = 0; m < spec.mesh().ndim(); ++m) {
    const Placement& p = spec.placements()[static_cast<std::size_t>(m)];
    if (p.is_partial() && p.reduce_op() == ReduceOp::Sum) dims.push_back(m);
  }
  return dims;
}

// The bucket's members packed into one flat tensor.
Tensor packed(const std::vector<DTensor>& in, const Bucket& b) {
  const DTensor& first = in[b.members[0]];
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
  return flat;
}

// The reduced flat tensor handed back as the members' Replicate tensors:
// views of it, as DDP's gradients are views of its buckets, so that a step
// copies each gradient once (into the bucket), not twice. The views are
// disjoint and contiguous.
void unpack(const std::vector<DTensor>& in, const Bucket& b, const Tensor& flat,
            std::vector<DTensor>& out) {
  const DTensorSpec& spec = in[b.members[0]].spec();
  const Placements target = target_of(spec.placements());
  std::int64_t at = 0;
  for (auto i : b.members) {
    const Tensor& l = in[i].to_local();
    out[i] = DTensor(flat.narrow(0, at, l.numel()).view(l.shape()),
                     DTensorSpec(spec.mesh(), target, in[i].shape(), in[i].dtype()));
    at += l.numel();
  }
}

// Tensors sharing mesh, dtype and placements, in order, up to `bucket_bytes`
// a bucket; tensors with nothing pending are left out.
std::vector<Bucket> form_buckets(const std::vector<DTensor>& tensors, std::size_t bucket_bytes) {
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
  return buckets;
}

}  // namespace

std::vector<DTensor> reduce_partials(const std::vector<DTensor>& tensors,
                                     std::size_t bucket_bytes) {
  std::vector<DTensor> out(tensors);
  if (tensors.empty()) return out;
  // A public call of its own, like redistribute: the desync check names it
  // and the operator profile times it (a backward's gradients meet here).
  detail::CommScope scope("reduce_partials");
  // Every rank sees the same list, so the buckets (and the collectives) are
  // formed in the same order everywhere; one agreement check covers them all.
  std::size_t fingerprint = tensors.size();
  for (const auto& t : tensors)
    fingerprint = fingerprint * 1000003u ^ t.spec().hash();
  // Posted now and confirmed before anything waits: the small buckets' sums
  // are posted first, under a tag of this call's own, and travel with it.
  CheckedCall call(tensors[0].mesh().get_mesh_group(), fingerprint, "reduce_partials",
                   agreement_description([&] {
                     std::string d;
                     for (const auto& t : tensors)
                       d += t.spec().str() + ";";
                     return d;
                   }));
  const auto buckets = call.local([&] { return form_buckets(tensors, bucket_bytes); });
  // The small buckets first, packed and posted, each a DirectAllreduce; the
  // others, packed one at a time after the check (their collectives wait).
  std::vector<Tensor> flats(buckets.size());
  std::vector<std::vector<std::int64_t>> dims(buckets.size());
  std::vector<std::optional<DirectAllreduce>> started(buckets.size());
  for (std::size_t k = 0; k < buckets.size(); ++k) {
    const DTensor& first = tensors[buckets[k].members[0]];
    dims[k] = partial_dims(first.spec());
    if (dims[k].size() != 1) continue;
    const auto g = first.mesh().get_group(dims[k][0]);
    if (!fits_direct_allreduce(*g, buckets[k].bytes, first.to_local().device().type)) continue;
    flats[k] = packed(tensors, buckets[k]);
    started[k].emplace(*g, flats[k], ReduceOp::Sum, call.tag);
  }
  call.agreement.confirm();
  for (std::size_t k = 0; k < buckets.size(); ++k) {
    if (started[k]) {
      started[k]->finish();
    } else {
      flats[k] = packed(tensors, buckets[k]);
      for (std::int64_t m : dims[k])
        tensors[buckets[k].members[0]].mesh().get_group(m)->allreduce(flats[k]);
    }
    unpack(tensors, buckets[k], flats[k], out);
    flats[k] = Tensor();
  }
  return out;
}

}  // namespace dtensor
