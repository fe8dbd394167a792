#!/usr/bin/env python3
"""Checks a `dtensor-op OP --dump DIR` directory against PyTorch.

Replays the operator named in meta.json with torch.nn.functional in float64
on the dumped input (and weight and bias, cat's input1.., batch_norm's
running statistics, the losses' target, the binary operators' other; the
shape operators with torch.reshape/permute/transpose/flatten/narrow, exact;
reductions and softmax with torch's own functions), and its gradients with
autograd
from the dumped grad_output (the losses: from 1); compares every dumped
result and prints the max abs error and the tolerance of each (dtensor-conv's
bound, see tools/cli/tolerance.h, widened for the normalisations by
max 1/sqrt(var + eps), squared for grad_input; the forward of the max pools,
nearest upsampling and cat and cat's gradients must be exact). batch_norm's
updated running statistics (running_mean_out, running_var_out) are compared
with F.batch_norm's in-place update.

Where PyTorch has no direct spelling the replay is built from what it has,
with PyTorch's semantics kept:
  - asymmetric (left != right) pool padding: max_pool pads with -inf, avg_pool
    computes window sums, valid counts and PyTorch's pool_size (the window
    clipped to [-pl, L + pr)) with depthwise convolutions of ones; the output
    length is PyTorch's (ceil_mode drops a last window that starts in the
    right padding, i.e. at or after L + pl);
  - avg_pool1d with divisor_override: avg_pool2d on a unit height;
  - convolution padding (zeros with left != right, or a padding_mode): F.pad
    first, then the convolution without padding.

Usage: check_op_dump.py DIR [--quiet]
Exit status: 0 all within tolerance, 1 a tensor over tolerance (or missing,
or of the wrong shape), 2 bad usage or an unreadable dump, 77 PyTorch or
numpy not importable (the conventional "skipped" status).

Works with Debian 12's python3-torch 1.13 and python3-numpy.
"""

import json
import math
import os
import re
import sys


def tolerance(dtype, terms, ranks, ref_max):
    """The bound of tools/cli/tolerance.h; keep the two in step."""
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


def floor_div(a, b):
    return a // b  # Python's // floors


def ceil_div(a, b):
    return -((-a) // b)


def pool_length(length, k, s, d, pl, pr, ceil_mode):
    """PyTorch's pooling_output_shape_pad_lr."""
    span = length + pl + pr - d * (k - 1) - 1
    out = (ceil_div(span, s) if ceil_mode else floor_div(span, s)) + 1
    if ceil_mode and out > 0 and (out - 1) * s >= length + pl:
        out -= 1
    return out


class BadDump(Exception):
    pass


NORMS = ("batch_norm", "group_norm", "instance_norm", "layer_norm")
ACTIVATIONS = ("leaky_relu", "gelu", "silu", "sigmoid", "tanh", "relu")
POINTWISE_LOSSES = ("l1_loss", "smooth_l1_loss", "huber_loss", "binary_cross_entropy_with_logits")
LOSSES = ("mse_loss", "cross_entropy") + POINTWISE_LOSSES
BINARY = ("add", "sub", "mul", "div", "maximum", "minimum")


def plain_unary_functions():
    """The plain unary functions (one input, no parameter), read from the
    library's one list of them, DTENSOR_PLAIN_UNARY_FUNCTIONS: each is
    replayed as torch.OP. A row is X(NAME, FUNCTION, OP, POSITIVE, LINEAR)."""
    header = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "include", "dtensor",
                          "ops", "kernels", "elementwise_math.h")
    with open(header, encoding="utf-8") as f:
        text = f.read()
    block = re.search(r"#define DTENSOR_PLAIN_UNARY_FUNCTIONS\(X\)((?:.*\\\n)*.*\n)", text)
    names = tuple(re.findall(r"X\(\s*\w+\s*,\s*\w+\s*,\s*(\w+)\s*,", block.group(1))) if block else ()
    if not names:
        raise RuntimeError(f"{header}: no DTENSOR_PLAIN_UNARY_FUNCTIONS list")
    return names


PLAIN_UNARY = plain_unary_functions()
UNARY = PLAIN_UNARY + ("clamp", "pow")
REDUCTIONS = ("sum", "mean", "amax", "amin", "var")
SOFTMAX = ("softmax", "log_softmax")
NN_OPS = (("upsample", "cat", "dropout", "linear") + NORMS + ACTIVATIONS + LOSSES + BINARY + UNARY + REDUCTIONS
          + SOFTMAX)


def replay_reduction(meta, torch, x, leaves):
    """The reductions over meta's `dims` (with `keepdim`; var with
    `correction`) and softmax / log_softmax along `dim`. torch.var of torch
    1.13 takes an integral correction only: another one is replayed as
    sum((x - mean)^2) / max(0, N - correction), PyTorch's definition."""
    op = meta["op"]
    if op in SOFTMAX:
        if "dim" not in meta:
            raise BadDump(f"meta.json lists no 'dim' for {op}")
        dim = int(meta["dim"])
        y = (torch.softmax if op == "softmax" else torch.log_softmax)(x, dim)
        n = x.shape[dim]
        return y, [("output", n + 4, False)], [("grad_input", "input", 2 * n + 8)], leaves
    if "dims" not in meta or "keepdim" not in meta:
        raise BadDump(f"meta.json lists no 'dims' or 'keepdim' for {op}")
    dims = [int(d) for d in meta["dims"]]
    keepdim = bool(meta["keepdim"])
    n = math.prod(x.shape[d] for d in dims)
    if op == "var":
        c = float(meta["correction"])
        if c == int(c):
            y = torch.var(x, dims, correction=int(c), keepdim=keepdim)
        else:
            m2 = ((x - x.mean(dims, keepdim=True)) ** 2).sum(dims, keepdim=keepdim)
            y = m2 / max(0.0, n - c)
    else:
        y = {"sum": torch.sum, "mean": torch.mean, "amax": torch.amax,
             "amin": torch.amin}[op](x, dims, keepdim=keepdim)
    # amax and amin select an element: exact.
    return y, [("output", n + 4, op in ("amax", "amin"))], [("grad_input", "input", n + 8)], leaves


VIEWS = ("reshape", "permute", "transpose", "flatten", "narrow")


def replay_view(meta, torch, x, leaves):
    """The shape operators, with their resolved options from meta.json. They
    move values: the output and grad_input must be exact."""
    op = meta["op"]
    if op == "reshape":
        y = torch.reshape(x, [int(n) for n in meta["shape"]])
    elif op == "permute":
        y = x.permute([int(d) for d in meta["order"]])
    elif op == "transpose":
        y = torch.transpose(x, int(meta["dim0"]), int(meta["dim1"]))
    elif op == "flatten":
        y = torch.flatten(x, int(meta["start_dim"]), int(meta["end_dim"]))
    else:
        y = torch.narrow(x, int(meta["dim"]), int(meta["start"]), int(meta["length"]))
    return y, [("output", 1, True)], [("grad_input", "input", 1, True)], leaves


# Checks that are not a comparison of two tensors (dropout's kept fraction):
# (line to print, passed).
EXTRA_CHECKS = []


def replay_dropout(meta, load, files, x, leaves):
    """dropout's mask is the library's own (seed, index) hash, which PyTorch
    does not have: the dumped output must be, element by element, either 0
    or input / (1 - p); that mask read back from it (an element whose input
    is 0 counts as kept where its gradient is not 0) must give grad_input =
    grad_output * mask / (1 - p); and the kept fraction must be within 6
    standard deviations of 1 - p."""
    p = float(meta["p"])
    xd = x.detach()
    out = load("output")
    scale = 1.0 / (1.0 - p) if p < 1 else 0.0
    kept = out != 0
    if "grad_input" in files:
        kept = kept | ((xd == 0) & (load("grad_input") != 0))
    y = x * kept.to(x.dtype) * scale
    n = xd.numel()
    if n and 0 < p < 1:
        fraction = float(kept.sum()) / n
        spread = 6 * math.sqrt(p * (1 - p) / n) + 1.0 / n
        good = abs(fraction - (1 - p)) <= spread
        EXTRA_CHECKS.append((f"{'kept':<12} {fraction:.4f} of {n} (1 - p = {1 - p:.4f}, "
                             f"+-{spread:.4f})  {'ok' if good else 'IMPLAUSIBLE'}", good))
    return y, [("output", 1, False)], [("grad_input", "input", 1)], leaves


def replay_tensor_api(meta, load, files, torch, x, leaves):
    """The tensor API's element-wise operators: binary ones broadcast the
    dumped `other` (its gradient summed back to its shape by autograd), unary
    ones take their parameters from meta.json."""
    op = meta["op"]
    if op in BINARY:
        if "other" not in files:
            raise BadDump(f"meta.json lists no 'other' for {op}")
        other = load("other").requires_grad_(True)
        leaves["other"] = other
        y = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
             "maximum": torch.maximum, "minimum": torch.minimum}[op](x, other)
        repeats = max(x.numel() // max(other.numel(), 1), 1)
        # maximum and minimum select an operand: exact.
        return y, [("output", 2, op in ("maximum", "minimum"))], [
            ("grad_input", "input", 4), ("grad_other", "other", repeats + 4)], leaves
    if op == "clamp":
        lo, hi = meta.get("min"), meta.get("max")
        if lo is None and hi is None:
            raise BadDump("clamp needs min or max in meta.json")
        y = torch.clamp(x, min=None if lo is None else float(lo),
                        max=None if hi is None else float(hi))
    elif op == "pow":
        y = torch.pow(x, float(meta["exponent"]))
    else:
        y = getattr(torch, op)(x)  # a plain unary function: torch.OP
    return y, [("output", 4, False)], [("grad_input", "input", 8)], leaves


def replay_nn(meta, load, files, torch, F, x, leaves):
    """The U-Net operators. Returns (y, forward, backward, leaves) as replay
    does; forward entries may carry their own tensor (running statistics)."""
    op = meta["op"]
    nsp = x.dim() - 2
    if op in BINARY + UNARY:
        return replay_tensor_api(meta, load, files, torch, x, leaves)
    if op in REDUCTIONS + SOFTMAX:
        return replay_reduction(meta, torch, x, leaves)
    if op == "upsample":
        mode = meta["mode"]
        kwargs = {}
        if mode == "nearest":
            kwargs["mode"] = "nearest"
        elif mode == "linear":
            kwargs["mode"] = {1: "linear", 2: "bilinear", 3: "trilinear"}[nsp]
            kwargs["align_corners"] = bool(meta["align_corners"])
        else:
            raise BadDump(f"unknown upsample mode '{mode}'")
        if meta.get("size") is not None:
            y = F.interpolate(x, size=[int(v) for v in meta["size"]], **kwargs)
        else:
            y = F.interpolate(x, scale_factor=[float(v) for v in meta["scale_factor"]], **kwargs)
        readers = 1
        for i in range(nsp):
            length, out = x.shape[2 + i], y.shape[2 + i]
            readers *= 2 * ceil_div(out, length) + 2
        return y, [("output", 2 ** nsp, mode == "nearest")], [
            ("grad_input", "input", readers)], leaves

    if op in NORMS:
        eps = float(meta["eps"])
        affine = bool(meta["affine"])
        w = load("weight").requires_grad_(True) if affine else None
        b = load("bias").requires_grad_(True) if affine else None
        leaves["weight"], leaves["bias"] = w, b
        n, c = x.shape[0], x.shape[1]
        xd = x.detach()
        training = bool(meta.get("training", True))
        if op == "batch_norm":
            rm, rv = load("running_mean"), load("running_var")
            y = F.batch_norm(x, rm, rv, w, b, training, float(meta["momentum"]), eps)
            if training:
                var = xd.transpose(0, 1).reshape(c, -1).var(dim=1, unbiased=False)
            else:
                var = load("running_var")
            per_stat = xd.numel() // c
        elif op == "group_norm":
            groups = int(meta["num_groups"])
            y = F.group_norm(x, groups, w, b, eps)
            var = xd.reshape(n, groups, -1).var(dim=2, unbiased=False)
            per_stat = xd.numel() // (n * groups)
        elif op == "instance_norm":
            y = F.instance_norm(x, weight=w, bias=b, eps=eps)
            var = xd.reshape(n, c, -1).var(dim=2, unbiased=False)
            per_stat = xd.numel() // (n * c)
        else:
            y = F.layer_norm(x, list(x.shape[1:]), w, b, eps)
            var = xd.reshape(n, -1).var(dim=1, unbiased=False)
            per_stat = xd.numel() // n
        amp = max(1.0, float((1.0 / torch.sqrt(var + eps)).max()))
        params = w.numel() if w is not None else c
        per_param = max(xd.numel() // params, 1)
        forward = [("output", per_stat + 2, False, amp)]
        if op == "batch_norm":
            forward += [("running_mean_out", per_stat + 2, False, 1.0, rm),
                        ("running_var_out", per_stat + 2, False, 1.0, rv)]
        return y, forward, [
            ("grad_input", "input", per_stat + 2, False, amp * amp),
            ("grad_weight", "weight", per_param, False, amp),
            ("grad_bias", "bias", per_param),
        ], leaves

    if op == "cat":
        k = int(meta["inputs"])
        xs = [x]
        for i in range(1, k):
            name = f"input{i}"
            if name not in files:
                raise BadDump(f"meta.json lists no '{name}' for cat with {k} inputs")
            xs.append(load(name).requires_grad_(True))
            leaves[name] = xs[-1]
        y = torch.cat(xs, int(meta["cat_dim"]))
        return y, [("output", 1, True)], [("grad_input", "input", 1, True)] + [
            (f"grad_input{i}", f"input{i}", 1, True) for i in range(1, k)], leaves

    if op in ACTIVATIONS:
        if op == "leaky_relu":
            y = F.leaky_relu(x, float(meta["negative_slope"]))
        elif op == "gelu":
            y = F.gelu(x, approximate=meta["approximate"])
        elif op == "silu":
            y = F.silu(x)
        elif op == "sigmoid":
            y = torch.sigmoid(x)
        elif op == "tanh":
            y = torch.tanh(x)
        else:
            y = F.relu(x)
        return y, [("output", 4, False)], [("grad_input", "input", 4)], leaves

    if op == "dropout":
        return replay_dropout(meta, load, files, x, leaves)

    if op == "linear":
        w = load("weight").requires_grad_(True)
        b = load("bias").requires_grad_(True) if meta["bias"] else None
        leaves["weight"], leaves["bias"] = w, b
        rows = x.numel() // max(x.shape[-1], 1)
        y = F.linear(x, w, b)
        return y, [("output", x.shape[-1] + 1, False)], [
            ("grad_input", "input", w.shape[0]),
            ("grad_weight", "weight", rows),
            ("grad_bias", "bias", rows),
        ], leaves

    if op in LOSSES:
        t = load("target")
        reduction = meta["reduction"]
        if op == "mse_loss":
            y = F.mse_loss(x, t, reduction=reduction)
            terms_gx = 2
        elif op == "l1_loss":
            y = F.l1_loss(x, t, reduction=reduction)
            terms_gx = 4
        elif op == "smooth_l1_loss":
            y = F.smooth_l1_loss(x, t, reduction=reduction, beta=float(meta["beta"]))
            terms_gx = 4
        elif op == "huber_loss":
            y = F.huber_loss(x, t, reduction=reduction, delta=float(meta["delta"]))
            terms_gx = 4
        elif op == "binary_cross_entropy_with_logits":
            y = F.binary_cross_entropy_with_logits(x, t, reduction=reduction)
            terms_gx = 4
        else:
            # The target's kind and F.cross_entropy's options (dumps that
            # predate them hold probabilities and PyTorch's defaults).
            ignore_index = int(meta.get("ignore_index", -100))
            smoothing = float(meta.get("label_smoothing", 0.0))
            if meta.get("target", "probabilities") == "indices":
                t = t.long()  # int64 in the file; loaded through float64, exact for indices
            y = F.cross_entropy(x, t, ignore_index=ignore_index, reduction=reduction,
                                label_smoothing=smoothing)
            terms_gx = x.shape[1] + 2
        return y, [("output", x.numel() + 1, False)], [("grad_input", "input", terms_gx)], leaves

    raise BadDump(f"unknown op '{op}'")


def replay_declared(meta, load, torch):
    """An operator whose dtensor-op row declares its PyTorch call in
    meta.json's "torch" (a row registered from its own file): {"function":
    "nn.functional.lp_pool2d", "args": [...], "kwargs": {...},
    "output_terms": n, "grad_terms": m, optionally "exact" and "factor"}.
    The function is looked up name by name under torch (nothing is
    evaluated) and called as function(input, *args, **kwargs)."""
    spec = meta["torch"]
    fn = torch
    for part in str(spec["function"]).split("."):
        if not part.isidentifier() or part.startswith("_"):
            raise BadDump(f"'{spec['function']}' is not a public name under torch")
        fn = getattr(fn, part, None)
        if fn is None:
            raise BadDump(f"torch {torch.__version__} has no torch.{spec['function']}")
    x = load("input").requires_grad_(True)
    y = fn(x, *spec.get("args", []), **spec.get("kwargs", {}))
    factor = float(spec.get("factor", 1.0))
    exact = bool(spec.get("exact", False))
    return y, [("output", int(spec["output_terms"]), exact, factor)], [
        ("grad_input", "input", int(spec["grad_terms"]), exact, factor)], {"input": x}


def replay(meta, load, files, torch, F):
    """Returns (results, leaves): results is [(name, reference, terms, exact)]
    once backward ran; leaves maps input/weight/bias to their tensors."""
    op = meta["op"]
    if "torch" in meta:
        return replay_declared(meta, load, torch)
    if op in VIEWS:  # any rank
        x = load("input").requires_grad_(True)
        return replay_view(meta, torch, x, {"input": x})
    nsp = int(meta["spatial_dims"])
    if nsp not in (1, 2, 3) and not (op in NN_OPS and nsp == 0):
        raise BadDump(f"{nsp} spatial dims are not supported")
    x = load("input").requires_grad_(True)
    xshape = list(x.shape)
    leaves = {"input": x}
    if op in NN_OPS:
        return replay_nn(meta, load, files, torch, F, x, leaves)
    padding = [(int(l), int(r)) for l, r in meta.get("padding", [[0, 0]] * nsp)]

    def flat_pad(pairs):
        # F.pad lists (left, right) pairs from the LAST dim backwards.
        out = []
        for left, right in reversed(pairs):
            out += [left, right]
        return out

    def ones_conv(t, kernel, stride):
        """Window sums over `kernel` (no padding), per channel."""
        n, c = t.shape[0], t.shape[1]
        flat = t.reshape([n * c, 1] + list(t.shape[2:]))
        w = torch.ones([1, 1] + list(kernel), dtype=t.dtype)
        conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[nsp]
        out = conv(flat, w, stride=stride)
        return out.reshape([n, c] + list(out.shape[2:]))

    def crop(t, sizes):
        for i, o in enumerate(sizes):
            t = t.narrow(2 + i, 0, o)
        return t

    k = [int(v) for v in meta.get("kernel", [])]
    stride = [int(v) for v in meta.get("stride", [])]
    dilation = [int(v) for v in meta.get("dilation", [1] * nsp)]
    spatial = xshape[2:]
    results = []

    if op in ("conv", "conv_transpose"):
        w = load("weight").requires_grad_(True)
        b = load("bias").requires_grad_(True) if "bias" in files else None
        leaves["weight"], leaves["bias"] = w, b
        groups = int(meta["groups"])
        ksize = math.prod(w.shape[2:])
        if op == "conv":
            mode = meta.get("padding_mode", "zeros")
            xp = F.pad(x, flat_pad(padding)) if mode == "zeros" else F.pad(x, flat_pad(padding),
                                                                          mode=mode)
            conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[nsp]
            y = conv(xp, w, b, stride=stride, padding=0, dilation=dilation, groups=groups)
            terms_out = w.shape[1] * ksize + (1 if b is not None else 0)
            terms_gx = (w.shape[0] // groups) * ksize
            terms_gw = None  # per output, below
        else:
            if any(l != r for l, r in padding):
                raise BadDump("conv_transpose padding must be symmetric")
            conv_t = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}[nsp]
            y = conv_t(x, w, b, stride=stride, padding=[l for l, _ in padding],
                       output_padding=[int(v) for v in meta["output_padding"]], groups=groups,
                       dilation=dilation)
            terms_out = (w.shape[0] // groups) * ksize + (1 if b is not None else 0)
            terms_gx = w.shape[1] * ksize
            terms_gw = xshape[0] * math.prod(spatial)
        return y, [("output", terms_out, False)], [
            ("grad_input", "input", terms_gx),
            ("grad_weight", "weight", terms_gw),
            ("grad_bias", "bias", None),
        ], leaves

    if op == "max_pool":
        ceil_mode = bool(meta["ceil_mode"])
        ksize = math.prod(k)
        if all(l == r for l, r in padding):
            pool = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}[nsp]
            y = pool(x, k, stride, [l for l, _ in padding], dilation, ceil_mode=ceil_mode)
        else:
            outs = [pool_length(spatial[i], k[i], stride[i], dilation[i], padding[i][0],
                                padding[i][1], ceil_mode) for i in range(nsp)]
            pairs = []
            for i in range(nsp):
                need = (outs[i] - 1) * stride[i] + dilation[i] * (k[i] - 1) + 1
                pairs.append((padding[i][0], max(padding[i][1], need - spatial[i] - padding[i][0])))
            xp = F.pad(x, flat_pad(pairs), value=-math.inf)
            pool = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}[nsp]
            y = crop(pool(xp, k, stride, 0, dilation), outs)
        return y, [("output", 1, True)], [("grad_input", "input", ksize)], leaves

    if op == "avg_pool":
        ceil_mode = bool(meta["ceil_mode"])
        include = bool(meta["count_include_pad"])
        override = meta.get("divisor_override")
        ksize = math.prod(k)
        if all(l == r for l, r in padding) and (override is None or nsp > 1):
            pool = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}[nsp]
            kwargs = {} if nsp == 1 else {"divisor_override": override}
            y = pool(x, k, stride, [l for l, _ in padding], ceil_mode=ceil_mode,
                     count_include_pad=include, **kwargs)
        elif all(l == r for l, r in padding):
            # avg_pool1d has no divisor_override: a unit height.
            y = F.avg_pool2d(x.unsqueeze(2), [1] + k, [1] + stride, [0, padding[0][0]],
                             ceil_mode=ceil_mode, count_include_pad=include,
                             divisor_override=override).squeeze(2)
        else:
            outs = [pool_length(spatial[i], k[i], stride[i], 1, padding[i][0], padding[i][1],
                                ceil_mode) for i in range(nsp)]
            pairs, extra = [], []
            for i in range(nsp):
                need = (outs[i] - 1) * stride[i] + k[i]
                e = max(0, need - (spatial[i] + padding[i][0] + padding[i][1]))
                extra.append(e)
                pairs.append((padding[i][0], padding[i][1] + e))
            sums = crop(ones_conv(F.pad(x, flat_pad(pairs)), k, stride), outs)
            ones = torch.ones_like(x)
            count = crop(ones_conv(F.pad(ones, flat_pad(pairs)), k, stride), outs)
            padded_ones = torch.ones([xshape[0], xshape[1]] + [spatial[i] + padding[i][0] +
                                                               padding[i][1] for i in range(nsp)],
                                     dtype=x.dtype)
            pool_size = crop(ones_conv(F.pad(padded_ones, flat_pad([(0, e) for e in extra])), k,
                                       stride), outs)
            if override is not None:
                divisor = torch.full_like(sums, float(override))
            else:
                divisor = pool_size if include else count
            # An empty clipped window gives 0 (PyTorch skips it).
            safe = torch.where(count > 0, divisor, torch.ones_like(divisor))
            y = torch.where(count > 0, sums / safe, torch.zeros_like(sums))
        return y, [("output", ksize + 1, False)], [("grad_input", "input", ksize + 1)], leaves

    if op in ("adaptive_avg_pool", "adaptive_max_pool"):
        out_size = [int(v) for v in meta["output_size"]]
        terms = math.prod(ceil_div(spatial[i], out_size[i]) + 1 for i in range(nsp))
        if op == "adaptive_avg_pool":
            pool = {1: F.adaptive_avg_pool1d, 2: F.adaptive_avg_pool2d,
                    3: F.adaptive_avg_pool3d}[nsp]
            return pool(x, out_size), [("output", terms + 1, False)], [
                ("grad_input", "input", terms + 1)], leaves
        pool = {1: F.adaptive_max_pool1d, 2: F.adaptive_max_pool2d,
                3: F.adaptive_max_pool3d}[nsp]
        return pool(x, out_size), [("output", 1, True)], [("grad_input", "input", terms)], leaves

    if op == "pad":
        mode = meta["mode"]
        if mode == "constant":
            y = F.pad(x, flat_pad(padding), mode="constant", value=float(meta["value"]))
        else:
            y = F.pad(x, flat_pad(padding), mode=mode)
        terms = 1
        for i in range(nsp):
            length = max(spatial[i], 1)
            terms *= 1 + ceil_div(abs(padding[i][0]), length) + ceil_div(abs(padding[i][1]), length)
        return y, [("output", 1, False)], [("grad_input", "input", terms)], leaves

    raise BadDump(f"unknown op '{op}'")


def main(argv, prog="check_op_dump.py", default_op=None):
    """`default_op`: the operator of dumps whose meta.json names none
    (dtensor-conv's: "conv", through check_dump.py, whose messages keep their
    own name and leave the operator out of the summary)."""
    args = [a for a in argv[1:] if not a.startswith("--")]
    options = [a for a in argv[1:] if a.startswith("--")]
    quiet = "--quiet" in options
    if len(args) != 1 or any(o != "--quiet" for o in options):
        print(f"usage: {prog} DIR [--quiet]", file=sys.stderr)
        return 2
    directory = args[0]
    try:
        import numpy as np
        import torch
        import torch.nn.functional as F
    except ImportError as e:
        print(f"{prog}: skipped: cannot import PyTorch/numpy ({e})", file=sys.stderr)
        return 77

    try:
        with open(os.path.join(directory, "meta.json")) as f:
            meta = json.load(f)
    except (OSError, ValueError) as e:
        print(f"{prog}: cannot read {directory}/meta.json: {e}", file=sys.stderr)
        return 2

    files = meta.get("files", {})

    def load(name):
        path = os.path.join(directory, files[name])
        return torch.from_numpy(np.load(path).astype(np.float64))

    for required in ("input", "weight", "output") if default_op else ("input", "output"):
        if required not in files:
            print(f"{prog}: {directory}: meta.json lists no '{required}'", file=sys.stderr)
            return 2
    if "op" not in meta:
        if default_op is None:
            print(f"{prog}: {directory}: meta.json names no 'op'", file=sys.stderr)
            return 2
        meta["op"] = default_op

    try:
        y, forward, backward, leaves = replay(meta, load, files, torch, F)
    except (BadDump, KeyError, ValueError, RuntimeError) as e:
        print(f"{prog}: {directory}: cannot replay: {type(e).__name__}: {e}", file=sys.stderr)
        return 2

    dtype = meta["dtype"]
    ranks = int(meta.get("world_size", 1))
    # (name, reference, terms, exact, factor)
    results = []
    for entry in forward:
        name, terms, exact = entry[:3]
        factor = entry[3] if len(entry) > 3 else 1.0
        ref = entry[4] if len(entry) > 4 else y
        results.append((name, ref.detach(), terms, exact, factor))
    loss = meta["op"] in LOSSES
    if meta.get("backward", False) and ("grad_output" in files or loss):
        if loss:
            gy = torch.ones_like(y)  # the gradient of the loss is 1
            per_output = 1
        else:
            gy = load("grad_output")
            per_output = gy.shape[0] * math.prod(gy.shape[2:]) if gy.dim() else 1
        y.backward(gy)
        for entry in backward:
            name, leaf, terms = entry[:3]
            exact = entry[3] if len(entry) > 3 else False
            factor = entry[4] if len(entry) > 4 else 1.0
            t = leaves.get(leaf)
            if t is None:
                continue  # no bias
            results.append((name, t.grad if t.grad is not None else torch.zeros_like(t),
                            per_output if terms is None else terms, exact, factor))

    ok = True
    def max_abs_err(got, ref):
        """Equal values (infinities too: a max pool window without any input
        element gives -inf) and NaN against NaN are no error; NaN against a
        number is an infinite one."""
        if not ref.numel():
            return 0.0
        same = (got == ref) | (torch.isnan(got) & torch.isnan(ref))
        diff = torch.where(same, torch.zeros_like(ref), (got - ref).abs())
        diff = torch.nan_to_num(diff, nan=math.inf)
        return float(diff.max())

    for name, ref, terms, exact, factor in results:
        finite = ref[torch.isfinite(ref)]
        ref_max = float(finite.abs().max()) if finite.numel() else 0.0
        tol = 0.0 if exact else tolerance(dtype, terms, ranks, ref_max) * factor
        if name not in files:
            print(f"{name:<12} MISSING from the dump")
            ok = False
            continue
        got = load(name)
        if tuple(got.shape) != tuple(ref.shape):
            print(f"{name:<12} shape {tuple(got.shape)} but PyTorch gives {tuple(ref.shape)}")
            ok = False
            continue
        err = max_abs_err(got, ref)
        good = err <= tol
        ok = ok and good
        if not quiet or not good:
            print(f"{name:<12} max|err| {err:.3e}  tol {tol:.3e}  (max|ref| {ref_max:.3e})  "
                  f"{'ok' if good else 'OVER TOLERANCE'}")
    for line, good in EXTRA_CHECKS:
        print(line)
        ok = ok and good
    what = "" if default_op else f"{meta['op']}, "
    print(f"{prog}: {directory}: {'ok' if ok else 'FAILED'} "
          f"({what}{dtype}, {meta['spatial_dims']}-d, torch {torch.__version__})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
