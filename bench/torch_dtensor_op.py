#!/usr/bin/env python3
"""PyTorch DTensor running one window operator (pools, pad, transposed
convolution) on the same input placed as dtensor-op places it, for
side-by-side comparison. PyTorch DTensor shards pooling only on batch and
channel and transposed convolution only where stride equals the kernel, so on
a spatially sharded input it mostly redistributes first: that is the peer's
real cost. OPTIONAL: needs PyTorch >= 2.5 with torch.distributed.tensor
(`pip install torch` in a venv; never part of the tests). Prints one JSON
line: fwd_ms, bwd_ms (medians), like dtensor-op --json. With --local it runs
the operator on a plain tensor in this one process instead (no process
group, no DTensor): PyTorch's local kernel, the peer of dtensor-op at -n 1.

  python bench/torch_dtensor_op.py -n 2 max_pool --input 4,32,128,128 --kernel 3 \\
      --stride 2 --padding 1 --placement 3 --iters 10
"""
import argparse
import json
import os
import statistics
import tempfile
import time

from torch_dtensor_conv import core_slice  # noqa: E402 (the same binding as the conv peer)


def forward_fn(args, F, torch, mesh, Replicate, Shard, distribute_tensor, cin):
    k, s, p = args.kernel, args.stride, args.padding
    if args.op == "max_pool":
        return lambda x: F.max_pool2d(x, k, s or k, p, ceil_mode=args.ceil_mode)
    if args.op == "avg_pool":
        return lambda x: F.avg_pool2d(x, k, s or k, p, ceil_mode=args.ceil_mode,
                                      count_include_pad=args.count_include_pad)
    if args.op == "adaptive_avg_pool":
        return lambda x: F.adaptive_avg_pool2d(x, args.output_size)
    if args.op == "pad":
        return lambda x: F.pad(x, (p, p, p, p), mode=args.mode)
    if args.op == "upsample":
        return lambda x: F.interpolate(x, scale_factor=args.scale, mode=args.mode_up,
                                       align_corners=False if args.mode_up != "nearest" else None)
    if args.op == "group_norm":
        return lambda x: F.group_norm(x, args.num_groups)
    if args.op == "layer_norm":
        return lambda x: F.layer_norm(x, x.shape[1:])
    if args.op == "batch_norm":
        return lambda x: F.batch_norm(x, None, None, training=True)
    if args.op in ("gelu", "silu", "sigmoid", "tanh", "relu"):
        return getattr(F, args.op) if args.op not in ("sigmoid", "tanh") else getattr(torch, args.op)
    if args.op == "mse_loss":
        t = distribute_tensor(torch.randn(args.shape), mesh, [Shard(args.placement)])
        return lambda x: F.mse_loss(x, t)
    if args.op == "conv_transpose":
        w = distribute_tensor(torch.randn(cin, args.out_channels, k, k), mesh,
                              [Replicate()]).requires_grad_()
        return lambda x: F.conv_transpose2d(x, w, stride=s or 1, padding=p)
    raise SystemExit(f"unknown op {args.op}")


def timed(fn, x, gy, iters, warmup, sync):
    """Medians of forward and backward; (fwd_ms, bwd_ms or None, error)."""
    errors = []

    def step():
        sync()
        t0 = time.perf_counter()
        y = fn(x)
        sync()
        t1 = time.perf_counter()
        if not errors:
            try:
                y.backward(gy)
            except Exception as e:  # say which ops PyTorch cannot run backward
                errors.append(str(e).splitlines()[0][:200])
        sync()
        t2 = time.perf_counter()
        x.grad = None
        return (t1 - t0) * 1e3, (t2 - t1) * 1e3

    for _ in range(warmup):
        step()
    times = [step() for _ in range(iters)]
    fwd = statistics.median(t[0] for t in times)
    bwd = None if errors else statistics.median(t[1] for t in times)
    return fwd, bwd, (errors[0] if errors else None)


def local_run(args):
    if args.bind_cores:
        os.sched_setaffinity(0, core_slice(0, 1))
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(args.threads)
    shape = [int(v) for v in args.input.split(",")]
    torch.manual_seed(0)
    x = torch.randn(shape).requires_grad_()
    args.shape = shape
    plain = lambda t, mesh, placements: t  # noqa: E731 (no mesh: the tensor itself)
    fn = forward_fn(args, F, torch, None, lambda: None, lambda d: None, plain, shape[1])
    y0 = fn(x)
    gy = None if y0.dim() == 0 else torch.randn(y0.shape)
    fwd, bwd, error = timed(fn, x, gy, args.iters, args.warmup, lambda: None)
    out = {"torch_version": torch.__version__, "world_size": 1, "local": True, "op": args.op,
           "threads": args.threads, "fwd_ms": fwd, "bwd_ms": bwd}
    if error:
        out["bwd_error"] = error
    print(json.dumps(out))


def worker(rank, args, init_file, result_file):
    if args.bind_cores:
        os.sched_setaffinity(0, core_slice(rank, args.n))
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                            world_size=args.n)
    mesh = init_device_mesh("cpu", (args.n,))
    shape = [int(v) for v in args.input.split(",")]
    torch.manual_seed(0)
    dx = distribute_tensor(torch.randn(shape), mesh, [Shard(args.placement)]).requires_grad_()
    args.shape = shape
    fn = forward_fn(args, F, torch, mesh, Replicate, Shard, distribute_tensor, shape[1])
    y0 = fn(dx)
    # A loss is a scalar: its gradient is 1 (None); otherwise a dense grad_output.
    gy = None if y0.dim() == 0 else distribute_tensor(torch.randn(y0.shape), mesh,
                                                      list(y0.placements))
    fwd, bwd, error = timed(fn, dx, gy, args.iters, args.warmup, dist.barrier)
    if rank == 0:
        out = {"torch_version": torch.__version__, "world_size": args.n, "op": args.op,
               "output_placements": [str(p) for p in y0.placements], "fwd_ms": fwd,
               "bwd_ms": bwd}
        if error:
            out["bwd_error"] = error
        with open(result_file, "w") as f:
            json.dump(out, f)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("op")
    ap.add_argument("-n", type=int, default=2)
    ap.add_argument("--input", required=True)
    ap.add_argument("--placement", type=int, default=3, help="the tensor dim sharded (Shard(d))")
    ap.add_argument("--kernel", type=int, default=3)
    ap.add_argument("--stride", type=int, default=0, help="0: the kernel (pools), 1 (conv)")
    ap.add_argument("--padding", type=int, default=0)
    ap.add_argument("--ceil-mode", action="store_true")
    ap.add_argument("--count-include-pad", action="store_true")
    ap.add_argument("--output-size", type=int, nargs=2, default=[8, 8])
    ap.add_argument("--mode", default="constant")
    ap.add_argument("--out-channels", type=int, default=32)
    ap.add_argument("--scale", type=float, default=2.0)
    ap.add_argument("--mode-up", default="nearest", help="upsample: nearest | bilinear")
    ap.add_argument("--num-groups", type=int, default=4)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--bind-cores", action="store_true")
    ap.add_argument("--local", action="store_true",
                    help="a plain tensor in this process: PyTorch's local kernel")
    args = ap.parse_args()
    if args.local:
        return local_run(args)
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as d:
        init_file, result_file = os.path.join(d, "init"), os.path.join(d, "result.json")
        mp.spawn(worker, args=(args, init_file, result_file), nprocs=args.n, join=True)
        with open(result_file) as f:
            print(json.dumps(json.load(f)))


if __name__ == "__main__":
    main()
