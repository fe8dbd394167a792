// Executing one redistribute step on the local tensor. Every size comes from
// the specs before and after the step (docs/design.md §4): peers' shard shapes are
// computed, never exchanged, and uneven or empty shards need no padding
// because the collectives take per-rank counts.
#include "dtensor/core/errors.h"
#include "dtensor/placement/redistribute.h"

namespace dtensor {
namespace {

struct StepContext {
  const DTensorSpec& from;
  const DTensorSpec& to;
  std::int64_t mesh_dim;
  std::vector<std::int64_t> coord;  // this rank's
  std::int64_t n;                   // ranks along the mesh dim

  std::vector<std::int64_t> coord_of(std::int64_t q) const {
    auto c = coord;
    c[static_cast<std::size_t>(mesh_dim)] = q;
    return c;
  }
};

// Packs blocks (views) back to back into one contiguous buffer.
// Blocks (views) packed back to back into one buffer, with each block's count.
struct Packed {
  Tensor buffer;
  std::vector<std::int64_t> counts;
};
Packed pack(const std::vector<Tensor>& blocks, const Tensor& like) {
  Packed p;
  std::int64_t total = 0;
  for (auto& b : blocks)
    total += p.counts.emplace_back(b.numel());
  p.buffer = Tensor::empty({total}, like.dtype(), like.device());
  std::int64_t at = 0;
  for (auto& b : blocks) {
    if (b.numel() == 0) continue;
    p.buffer.narrow(0, at, b.numel()).view(b.shape()).copy_(b);
    at += b.numel();
  }
  return p;
}

std::vector<std::int64_t> numels(const std::vector<Shape>& shapes) {
  std::vector<std::int64_t> out;
  for (auto& s : shapes)
    out.push_back(shape_numel(s));
  return out;
}

// Copies consecutive blocks of `buf` (shapes[q]) into `out` at offsets[q] along dim d.
void unpack_along(const Tensor& buf, const std::vector<Shape>& shapes,
                  const std::vector<std::int64_t>& offsets, std::int64_t d, Tensor& out) {
  std::int64_t at = 0;
  for (std::size_t q = 0; q < shapes.size(); ++q) {
    const std::int64_t n = shape_numel(shapes[q]);
    if (n == 0) continue;
    out.narrow(d, offsets[q], shapes[q][d]).copy_(buf.narrow(0, at, n).view(shapes[q]));
    at += n;
  }
}

Tensor all_gather(const Tensor& local, const StepContext& s, ProcessGroup& g, std::int64_t d) {
  std::vector<Shape> shapes;
  std::vector<std::int64_t> offsets;
  const Shape base = s.to.global_offset_at(s.coord);
  for (std::int64_t q = 0; q < s.n; ++q) {
    shapes.push_back(s.from.local_shape_at(s.coord_of(q)));
    offsets.push_back(s.from.global_offset_at(s.coord_of(q))[d] - base[d]);
  }
  const auto counts = numels(shapes);
  Tensor out = Tensor::empty(s.to.local_shape_at(s.coord), local.dtype(), local.device());
  if (d == 0 || out.numel() == 0) {
    // Blocks along the outermost dim land in place, in rank order.
    Tensor flat = out.view({out.numel()});
    g.allgather(local.contiguous().view({local.numel()}), flat, counts);
    return out;
  }
  std::int64_t total = 0;
  for (auto c : counts)
    total += c;
  Tensor buf = Tensor::empty({total}, local.dtype(), local.device());
  g.allgather(local.contiguous().view({local.numel()}), buf, counts);
  unpack_along(buf, shapes, offsets, d, out);
  return out;
}

// The views of `local` (spec `from`) that become each peer's shard under `to` along dim d.
std::vector<Tensor> blocks_for_peers(const Tensor& local, const StepContext& s, std::int64_t d) {
  std::vector<Tensor> blocks;
  const Shape base = s.from.global_offset_at(s.coord);
  for (std::int64_t q = 0; q < s.n; ++q) {
    const auto c = s.coord_of(q);
    blocks.push_back(
        local.narrow(d, s.to.global_offset_at(c)[d] - base[d], s.to.local_shape_at(c)[d]));
  }
  return blocks;
}

Tensor reduce_scatter(const Tensor& local, const StepContext& s, ProcessGroup& g, std::int64_t d,
                      ReduceOp op) {
  const Packed in = pack(blocks_for_peers(local, s, d), local);
  Tensor out = Tensor::empty(s.to.local_shape_at(s.coord), local.dtype(), local.device());
  Tensor flat = out.view({out.numel()});
  g.reduce_scatter(in.buffer, flat, in.counts, op);
  return out;
}

Tensor all_to_all(const Tensor& local, const StepContext& s, ProcessGroup& g, std::int64_t d_from,
                  std::int64_t d_to) {
  const Packed send = pack(blocks_for_peers(local, s, d_to), local);

  // From q: q's old shard restricted to my new range along d_to.
  const Shape my_new = s.to.local_shape_at(s.coord);
  const Shape base = s.to.global_offset_at(s.coord);
  std::vector<Shape> recv_shapes;
  std::vector<std::int64_t> offsets;
  std::int64_t recv_total = 0;
  for (std::int64_t q = 0; q < s.n; ++q) {
    Shape sh = s.from.local_shape_at(s.coord_of(q));
    sh[d_to] = my_new[d_to];
    recv_total += shape_numel(sh);
    recv_shapes.push_back(sh);
    offsets.push_back(s.from.global_offset_at(s.coord_of(q))[d_from] - base[d_from]);
  }
  Tensor recv = Tensor::empty({recv_total}, local.dtype(), local.device());
  g.all_to_all(send.buffer, send.counts, recv, numels(recv_shapes));
  Tensor out = Tensor::empty(my_new, local.dtype(), local.device());
  unpack_along(recv, recv_shapes, offsets, d_from, out);
  return out;
}

}  // namespace

Tensor apply_redistribute_step(const Tensor& local, const DTensorSpec& from, const DTensorSpec& to,
                               const RedistributeStep& step) {
  from.mesh().require_member("redistribute");
  const auto& coord = from.mesh().get_coordinate();
  StepContext s{from, to, step.mesh_dim, *coord, from.mesh().size(step.mesh_dim)};
  auto group = from.mesh().get_group(step.mesh_dim);
  using K = RedistributeStep::Kind;
  switch (step.kind) {
    case K::AllGather:
      return all_gather(local, s, *group, step.from.dim());
    case K::AllReduce: {
      Tensor out = local.clone();
      group->allreduce(out, step.from.reduce_op());
      return out;
    }
    case K::ReduceScatter:
      return reduce_scatter(local, s, *group, step.to.dim(), step.from.reduce_op());
    case K::AllToAll:
      return all_to_all(local, s, *group, step.from.dim(), step.to.dim());
    case K::LocalChunk: {
      const auto d = step.to.dim();
      const std::int64_t off = to.global_offset_at(s.coord)[d] - from.global_offset_at(s.coord)[d];
      return local.narrow(d, off, to.local_shape_at(s.coord)[d]).clone();
    }
    case K::ToPartial: {
      // A sum must count the value once: index 0 keeps it, the others hold
      // zeros. avg/max/min of identical copies is the value itself.
      if (step.to.reduce_op() == ReduceOp::Sum && s.coord[step.mesh_dim] != 0)
        return Tensor::zeros(local.shape(), local.dtype(), local.device());
      return local.clone();
    }
  }
  return local;
}

std::optional<DirectAllreduce> start_reduction(const Tensor& local, const DTensorSpec& from,
                                               const RedistributeStep& step, int tag) {
  if (step.kind != RedistributeStep::Kind::AllReduce) return std::nullopt;
  from.mesh().require_member("redistribute");
  auto group = from.mesh().get_group(step.mesh_dim);
  if (!fits_direct_allreduce(*group, local)) return std::nullopt;
  return std::optional<DirectAllreduce>(std::in_place, *group, local.clone(), step.from.reduce_op(),
                                        tag);
}

}  // namespace dtensor
