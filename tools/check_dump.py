#!/usr/bin/env python3
"""Checks a `dtensor-conv --dump DIR` directory against PyTorch.

Recomputes the convolution from the dumped input, weight and bias with
torch.nn.functional.conv{1,2,3}d in float64 (asymmetric padding: F.pad first),
and the gradients with autograd from the dumped grad_output; compares every
dumped result and prints the max abs error and the tolerance of each.

Usage: check_dump.py DIR [--quiet]
Exit status: 0 all within tolerance, 1 a tensor over tolerance (or missing),
2 bad usage or an unreadable dump, 77 PyTorch or numpy not importable (the
conventional "skipped" status).

Works with Debian 12's python3-torch 1.13 and python3-numpy.
"""

import json
import math
import os
import sys


def tolerance(dtype, terms, ranks, ref_max):
    """The bound of tools/dtensor-conv/tolerance.h; keep the two in step."""
    scale = max(1.0, ref_max)
    if dtype == "f64":
        return 1e-10 * scale
    u32 = 2.0 ** -24
    tol = u32 * (8.0 * math.sqrt(max(terms, 0) + 1.0) + 2.0 * max(ranks, 1)) * scale
    if dtype == "bf16":
        tol += 2.0 ** -8 * 2.0 * (max(ranks, 1) + 2.0) * scale
    if dtype == "f16":
        tol += 2.0 ** -11 * 2.0 * (max(ranks, 1) + 2.0) * scale
    return tol


def main(argv):
    args = [a for a in argv[1:] if not a.startswith("--")]
    options = [a for a in argv[1:] if a.startswith("--")]
    quiet = "--quiet" in options
    if len(args) != 1 or any(o != "--quiet" for o in options):
        print("usage: check_dump.py DIR [--quiet]", file=sys.stderr)
        return 2
    directory = args[0]
    try:
        import numpy as np
        import torch
        import torch.nn.functional as F
    except ImportError as e:
        print(f"check_dump.py: skipped: cannot import PyTorch/numpy ({e})", file=sys.stderr)
        return 77

    try:
        with open(os.path.join(directory, "meta.json")) as f:
            meta = json.load(f)
    except (OSError, ValueError) as e:
        print(f"check_dump.py: cannot read {directory}/meta.json: {e}", file=sys.stderr)
        return 2

    def load(name):
        path = os.path.join(directory, meta["files"][name])
        return torch.from_numpy(np.load(path).astype(np.float64))

    files = meta.get("files", {})
    for required in ("input", "weight", "output"):
        if required not in files:
            print(f"check_dump.py: {directory}: meta.json lists no '{required}'", file=sys.stderr)
            return 2

    nsp = int(meta["spatial_dims"])
    conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}.get(nsp)
    if conv is None:
        print(f"check_dump.py: {nsp} spatial dims are not supported", file=sys.stderr)
        return 2
    stride = [int(s) for s in meta["stride"]]
    dilation = [int(d) for d in meta["dilation"]]
    groups = int(meta["groups"])
    padding = [(int(l), int(r)) for l, r in meta["padding"]]
    dtype = meta["dtype"]
    ranks = int(meta.get("world_size", 1))

    x = load("input").requires_grad_(True)
    w = load("weight").requires_grad_(True)
    b = load("bias").requires_grad_(True) if "bias" in files else None

    # F.pad lists (left, right) pairs from the LAST dim backwards.
    pad = []
    for left, right in reversed(padding):
        pad += [left, right]
    y = conv(F.pad(x, pad), w, b, stride=stride, padding=0, dilation=dilation, groups=groups)

    results = []  # (name, reference, reduction terms)
    ksize = math.prod(w.shape[2:])
    results.append(("output", y.detach(), w.shape[1] * ksize + (1 if b is not None else 0)))
    if "grad_output" in files and meta.get("backward", False):
        gy = load("grad_output")
        y.backward(gy)
        per_output = gy.shape[0] * math.prod(gy.shape[2:])
        results.append(("grad_input", x.grad, (w.shape[0] // groups) * ksize))
        results.append(("grad_weight", w.grad, per_output))
        if b is not None:
            results.append(("grad_bias", b.grad, per_output))

    ok = True
    for name, ref, terms in results:
        ref_max = float(ref.abs().max()) if ref.numel() else 0.0
        tol = tolerance(dtype, terms, ranks, ref_max)
        if name not in files:
            print(f"{name:<12} MISSING from the dump")
            ok = False
            continue
        got = load(name)
        if tuple(got.shape) != tuple(ref.shape):
            print(f"{name:<12} shape {tuple(got.shape)} but PyTorch gives {tuple(ref.shape)}")
            ok = False
            continue
        err = float((got - ref).abs().max()) if ref.numel() else 0.0
        good = err <= tol
        ok = ok and good
        if not quiet or not good:
            print(f"{name:<12} max|err| {err:.3e}  tol {tol:.3e}  (max|ref| {ref_max:.3e})  "
                  f"{'ok' if good else 'OVER TOLERANCE'}")
    print(f"check_dump.py: {directory}: {'ok' if ok else 'FAILED'} "
          f"({dtype}, {nsp}-d, torch {torch.__version__})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
