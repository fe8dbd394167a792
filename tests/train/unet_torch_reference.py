#!/usr/bin/env python3
"""The U-Net of dtensor-train-unet in PyTorch, as the oracle of its tests.

Writes DIR/x.npy, DIR/y.npy and DIR/init.safetensors (a seeded model and
batch), trains the model for --steps steps with the given optimiser, and
writes DIR/torch_losses.json, DIR/torch_lrs.json (the lr of each step),
DIR/torch_norms.json (each step's gradient norm before any clipping) and
DIR/torch_final.safetensors. The optimiser, scheduler and clipping options
are dtensor-train-unet's, with its defaults (PyTorch's). Safetensors
files are read and written here with json and numpy alone (the format is
an 8-byte header length, a JSON header, then the raw little-endian data).
"""
import argparse
import json
import struct
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

DTYPES = {"F64": np.float64, "F32": np.float32}


def write_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, array in tensors.items():
        array = np.ascontiguousarray(array)
        kind = "F64" if array.dtype == np.float64 else "F32"
        data = array.astype("<f8" if kind == "F64" else "<f4").tobytes()
        header[name] = {"dtype": kind, "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def read_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        a, b = e["data_offsets"]
        raw = blob[8 + n + a:8 + n + b]
        out[name] = np.frombuffer(raw, dtype=np.dtype(DTYPES[e["dtype"]]).newbyteorder("<")) \
            .reshape(e["shape"])
    return out


class DoubleConv(nn.Module):
    def __init__(self, a, b, groups):
        super().__init__()
        self.conv1 = nn.Conv2d(a, b, 3, padding=1)
        self.norm1 = nn.GroupNorm(groups, b)
        self.conv2 = nn.Conv2d(b, b, 3, padding=1)
        self.norm2 = nn.GroupNorm(groups, b)

    def forward(self, x):
        x = F.relu(self.norm1(self.conv1(x)))
        return F.relu(self.norm2(self.conv2(x)))


class UNet(nn.Module):
    def __init__(self, in_ch, out_ch, base, groups):
        super().__init__()
        self.enc1 = DoubleConv(in_ch, base, groups)
        self.enc2 = DoubleConv(base, 2 * base, groups)
        self.up = nn.ConvTranspose2d(2 * base, base, 2, stride=2)
        self.dec1 = DoubleConv(2 * base, base, groups)
        self.head = nn.Conv2d(base, out_ch, 1)

    def forward(self, x):
        e1 = self.enc1(x)
        e2 = self.enc2(F.max_pool2d(e1, 2, 2))
        return self.head(self.dec1(torch.cat([self.up(e2), e1], 1)))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shape", default="2,2,1,16,12", help="N,in_ch,out_ch,H,W")
    p.add_argument("--base", type=int, default=4)
    p.add_argument("--groups", type=int, default=2)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--optimizer", default="sgd")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.0)
    p.add_argument("--weight-decay", type=float, default=None)
    p.add_argument("--amsgrad", action="store_true")
    p.add_argument("--no-decay-norm-bias", action="store_true")
    p.add_argument("--scheduler", default="none")
    p.add_argument("--step-size", type=int)
    p.add_argument("--gamma", type=float, default=0.1)
    p.add_argument("--t-max", type=int)
    p.add_argument("--eta-min", type=float, default=0.0)
    p.add_argument("--start-factor", type=float, default=1.0 / 3)
    p.add_argument("--end-factor", type=float, default=1.0)
    p.add_argument("--total-iters", type=int, default=5)
    p.add_argument("--clip-grad-norm", type=float)
    a = p.parse_args()
    n, cin, cout, h, w = (int(v) for v in a.shape.split(","))
    torch.manual_seed(a.seed)
    model = UNet(cin, cout, a.base, a.groups).double()
    # Perturb the norms' affine parameters so that their gradients matter.
    with torch.no_grad():
        for name, t in model.named_parameters():
            if ".norm" in name:
                t.add_(0.1 * torch.randn_like(t))
    x = torch.randn(n, cin, h, w, dtype=torch.float64)
    y = torch.randn(n, cout, h, w, dtype=torch.float64)
    np.save(f"{a.out}/x.npy", x.numpy())
    np.save(f"{a.out}/y.npy", y.numpy())
    write_safetensors(f"{a.out}/init.safetensors",
                      {k: v.detach().numpy() for k, v in model.named_parameters()})
    params = list(model.named_parameters())
    if a.no_decay_norm_bias:
        # The trainer's second group: every norm weight and every bias, no decay.
        plain = [t for n, t in params if not (n.endswith(".bias") or ".norm" in n)]
        norm_bias = [t for n, t in params if n.endswith(".bias") or ".norm" in n]
        groups = [{"params": plain}, {"params": norm_bias, "weight_decay": 0.0}]
    else:
        groups = [{"params": [t for _, t in params]}]
    wd = {} if a.weight_decay is None else {"weight_decay": a.weight_decay}
    if a.optimizer == "sgd":
        opt = torch.optim.SGD(groups, lr=a.lr, momentum=a.momentum, **wd)
    elif a.optimizer == "rmsprop":
        opt = torch.optim.RMSprop(groups, lr=a.lr, momentum=a.momentum, **wd)
    elif a.optimizer == "adamw":
        opt = torch.optim.AdamW(groups, lr=a.lr, amsgrad=a.amsgrad, **wd)
    else:
        opt = torch.optim.Adam(groups, lr=a.lr, amsgrad=a.amsgrad, **wd)
    sched = None
    if a.scheduler == "step":
        sched = torch.optim.lr_scheduler.StepLR(opt, a.step_size, a.gamma)
    elif a.scheduler == "cosine":
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, a.t_max, a.eta_min)
    elif a.scheduler == "linear":
        sched = torch.optim.lr_scheduler.LinearLR(opt, a.start_factor, a.end_factor, a.total_iters)
    losses, lrs, norms = [], [], []
    for _ in range(a.steps):
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        losses.append(loss.item())
        loss.backward()
        norms.append(torch.norm(torch.stack([t.grad.norm() for t in model.parameters()])).item())
        if a.clip_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip_grad_norm)
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        if sched is not None:
            sched.step()
    for name, values in (("losses", losses), ("lrs", lrs), ("norms", norms)):
        with open(f"{a.out}/torch_{name}.json", "w") as f:
            json.dump(values, f)
    write_safetensors(f"{a.out}/torch_final.safetensors",
                      {k: v.detach().numpy() for k, v in model.named_parameters()})


if __name__ == "__main__":
    sys.exit(main())
