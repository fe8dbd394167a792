#!/usr/bin/env python3
"""PyTorch DTensor's tensor-parallel convolution (_tp_conv) on the same layer,
for side-by-side comparison with dtensor-conv. OPTIONAL: needs PyTorch >= 2.5
with torch.distributed.tensor (`pip install torch` in a venv; never part of the
tests). Prints one JSON line: fwd_ms, bwd_ms (medians), like dtensor-conv --json.

  python bench/torch_dtensor_conv.py -n 2 --input 1,64,256,256 --out-channels 64 \\
      --kernel 3 --stride 1 --padding 1 --iters 10
"""
import argparse
import json
import os
import statistics
import tempfile
import time


def core_slice(rank, n):
    """This rank's CPUs, split as dtensor-run --bind-cores splits them."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < n:
        return {cpus[rank % len(cpus)]}
    base, extra = divmod(len(cpus), n)
    start = rank * base + min(rank, extra)
    return set(cpus[start:start + base + (1 if rank < extra else 0)])


def worker(rank, args, init_file, result_file):
    if args.bind_cores:  # before torch starts any thread
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
    k, s, p, g = args.kernel, args.stride, args.padding, args.groups
    torch.manual_seed(0)
    x = torch.randn(shape)
    w = torch.randn(args.out_channels, shape[1] // g, k, k)
    b = torch.randn(args.out_channels)
    dx = distribute_tensor(x, mesh, [Shard(3)]).requires_grad_()
    dw = distribute_tensor(w, mesh, [Replicate()]).requires_grad_()
    db = distribute_tensor(b, mesh, [Replicate()]).requires_grad_()

    backward_error = []
    # A dense Shard(3) grad_output: _tp_conv's backward fails on torch.ones_like(y),
    # whose local shards are not plain contiguous tensors.
    y0 = F.conv2d(dx, dw, db, stride=s, padding=p, groups=g)
    gy = distribute_tensor(torch.randn(y0.shape), mesh, [Shard(3)])

    def step():
        dist.barrier()
        t0 = time.perf_counter()
        y = F.conv2d(dx, dw, db, stride=s, padding=p, groups=g)
        dist.barrier()
        t1 = time.perf_counter()
        if not backward_error:
            try:
                y.backward(gy)
            except Exception as e:  # _tp_conv's backward fails on some layers: say so
                backward_error.append(str(e).splitlines()[0][:200])
        dist.barrier()
        t2 = time.perf_counter()
        dx.grad = dw.grad = db.grad = None
        return (t1 - t0) * 1e3, (t2 - t1) * 1e3

    for _ in range(args.warmup):
        step()
    times = [step() for _ in range(args.iters)]
    if rank == 0:
        out = {"torch_version": torch.__version__, "world_size": args.n,
               "fwd_ms": statistics.median(t[0] for t in times), "bwd_ms": None}
        if backward_error:
            out["bwd_error"] = backward_error[0]
        else:
            out["bwd_ms"] = statistics.median(t[1] for t in times)
        with open(result_file, "w") as f:
            json.dump(out, f)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=2)
    ap.add_argument("--input", required=True)
    ap.add_argument("--out-channels", type=int, required=True)
    ap.add_argument("--kernel", type=int, default=3)
    ap.add_argument("--stride", type=int, default=1)
    ap.add_argument("--padding", type=int, default=1)
    ap.add_argument("--groups", type=int, default=1)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--bind-cores", action="store_true",
                    help="run each rank on its own CPUs, as dtensor-run --bind-cores")
    args = ap.parse_args()
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as d:
        init_file, result_file = os.path.join(d, "init"), os.path.join(d, "result.json")
        mp.spawn(worker, args=(args, init_file, result_file), nprocs=args.n, join=True)
        with open(result_file) as f:
            print(json.dumps(json.load(f)))


if __name__ == "__main__":
    main()
