#!/usr/bin/env python3
"""The peer of dtensor-train-unet for benchmarks: the same U-Net (the
trainer's model, docs/training.md), f32, SGD with momentum, trained in
PyTorch on DIR/x.npy and DIR/y.npy for --steps steps.

  python3 bench/torch_unet_train.py --data DIR --base 16 --groups 4 --steps 10 \
      --threads 2 [--channels-last] [--ddp 2] [--device cuda]

A step is timed from outside, as the trainer's is: the wall-clock difference
between runs of different --steps (bench/unet_vs_torch.py does that, side by
side with dtensor-train-unet). --ddp N runs N processes (gloo) each with 1/N
of the batch, as DistributedDataParallel does. --json prints the losses.
"""
import argparse
import json
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

# The model is the trainer tests' oracle's, so the two cannot drift apart.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "train"))
from unet_torch_reference import UNet  # noqa: E402


def train(a, rank=0, world=1):
    torch.set_num_threads(a.threads)
    x = torch.from_numpy(np.load(f"{a.data}/x.npy")).float()
    y = torch.from_numpy(np.load(f"{a.data}/y.npy")).float()
    if world > 1:
        x = x.chunk(world, 0)[rank]
        y = y.chunk(world, 0)[rank]
    torch.manual_seed(a.seed)
    model = UNet(x.shape[1], y.shape[1], a.base, a.groups)
    fmt = torch.channels_last if a.channels_last else torch.contiguous_format
    model = model.to(device=a.device, memory_format=fmt)
    x = x.to(a.device).contiguous(memory_format=fmt)
    y = y.to(a.device).contiguous(memory_format=fmt)
    if world > 1:
        model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum)
    losses = []
    for _ in range(a.steps):
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        losses.append(loss.item())
        loss.backward()
        opt.step()
    if a.json and rank == 0:
        print(json.dumps({"losses": losses, "steps": a.steps}))


def ddp_worker(rank, a):
    import torch.distributed as dist

    if a.cores:
        os.sched_setaffinity(0, {a.cores[rank % len(a.cores)]})
    dist.init_process_group("gloo", rank=rank, world_size=a.ddp)
    train(a, rank, a.ddp)
    # Both ranks done before teardown: without it PyTorch 2.15's Gloo aborted
    # ("terminate called without an active exception") in about half the runs.
    dist.barrier()
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", required=True)
    p.add_argument("--base", type=int, default=16)
    p.add_argument("--groups", type=int, default=4)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--ddp", type=int, default=0, help="ranks (gloo), each bound to one core")
    p.add_argument("--device", default="cpu", help="cpu or cuda (one process; no --ddp)")
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    if a.ddp and a.device != "cpu":
        p.error("--ddp runs on cpu only")
    a.cores = sorted(os.sched_getaffinity(0))
    if a.ddp:
        import torch.multiprocessing as mp

        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
        mp.spawn(ddp_worker, args=(a,), nprocs=a.ddp)
    else:
        train(a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
