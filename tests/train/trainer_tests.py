#!/usr/bin/env python3
"""End-to-end tests of dtensor-train-unet and dtensor-ckpt.

Usage: trainer_tests.py CASE --run DTENSOR_RUN --trainer TRAINER --ckpt DTENSOR_CKPT
Cases compare the trainer with PyTorch (unet_torch_reference.py; skipped,
exit 77, when torch is not importable), 4 ranks with 1, and a resharded
resume with an unbroken run.
"""
import argparse
import json
import os
import random
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SKIP = 77


def have(module):
    try:
        __import__(module)
        return True
    except ImportError:
        return False


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=240, **kw)
    if r.returncode != 0:
        sys.exit(f"FAILED ({r.returncode}): {' '.join(cmd)}\n--- stdout\n{r.stdout}\n--- stderr\n{r.stderr}")
    return r.stdout


def train(a, ranks, data, extra, dtype="f64", with_lrs=False):
    out = run([a.run, "-n", str(ranks), "--", a.trainer, "--data", data, "--dtype", dtype,
               "--json"] + extra)
    last = out.strip().splitlines()[-1]
    j = json.loads(last[last.index("{"):])  # after dtensor-run's "[0] " prefix
    assert j["steps"] == len(j["losses"]) == len(j["lrs"]), last
    return (j["losses"], j["lrs"]) if with_lrs else j["losses"]


def close(got, want, rel, what):
    assert len(got) == len(want), f"{what}: {len(got)} values, {len(want)} expected"
    for i, (g, w) in enumerate(zip(got, want)):
        if abs(g - w) > rel * max(1.0, abs(w)):
            sys.exit(f"{what}[{i}]: {g!r} differs from {w!r} by more than {rel}")


def reference(tmp, extra=(), **kw):
    args = [sys.executable, os.path.join(HERE, "unet_torch_reference.py"), "--out", tmp]
    for k, v in kw.items():
        args += [f"--{k}", str(v)]
    run(args + list(extra))
    with open(os.path.join(tmp, "torch_losses.json")) as f:
        return json.load(f)


def torch_json(tmp, what):
    with open(os.path.join(tmp, f"torch_{what}.json")) as f:
        return json.load(f)


def numpy_data(tmp, shape=(2, 2, 1, 16, 12), seed=3):
    import numpy as np
    rng = np.random.default_rng(seed)
    n, cin, cout, h, w = shape
    np.save(f"{tmp}/x.npy", rng.standard_normal((n, cin, h, w)))
    np.save(f"{tmp}/y.npy", rng.standard_normal((n, cout, h, w)))


def case_torch(a, tmp, ranks, mesh_args, optimizer, lr, momentum, consolidate, dtype="f64",
               extra=(), steps=4):
    """extra: options given to the trainer and the reference alike (with
    them, the lrs of each step are compared too)."""
    if not have("torch"):
        print("SKIPPED: python3 cannot import torch")
        return SKIP
    want = reference(tmp, extra, steps=steps, optimizer=optimizer, lr=lr, momentum=momentum)
    ckpt = os.path.join(tmp, "ckpt")
    got, lrs = train(a, ranks, tmp, mesh_args + [
        "--init", f"{tmp}/init.safetensors", "--groups", "2", "--steps", str(steps),
        "--optimizer", optimizer, "--lr", str(lr), "--save", ckpt] +
        (["--momentum", str(momentum)] if optimizer in ("sgd", "rmsprop") else []) + list(extra),
        dtype, with_lrs=True)
    # f32 arithmetic (the kernels in the data's own precision) against
    # PyTorch's f64: the losses agree to f32's accumulated rounding.
    close(got, want, 1e-10 if dtype == "f64" else 1e-4, f"{dtype} losses vs PyTorch f64")
    if extra:
        close(lrs, torch_json(tmp, "lrs"), 1e-15, "lrs vs PyTorch's")
    if dtype != "f64":
        # Not f64 to the last bits: a check that the f32 path really ran.
        assert any(g != w for g, w in zip(got, want)), "f32 losses equal f64's exactly"
        return 0
    if consolidate:
        sys.path.insert(0, HERE)
        from unet_torch_reference import read_safetensors
        run([a.ckpt, "consolidate", ckpt, f"{tmp}/mine.safetensors"])
        mine = read_safetensors(f"{tmp}/mine.safetensors")
        theirs = read_safetensors(f"{tmp}/torch_final.safetensors")
        params = {k: v for k, v in mine.items() if not k.startswith("optim.")}
        assert sorted(params) == sorted(theirs), (sorted(params), sorted(theirs))
        for k in theirs:
            assert params[k].shape == theirs[k].shape, k
            close(list(params[k].ravel()), list(theirs[k].ravel()), 1e-10, k)
        info = run([a.ckpt, "info", ckpt])
        for k in theirs:
            assert k in info, f"dtensor-ckpt info does not list {k}"
    return 0


def case_clip(a, tmp):
    """SGD, StepLR and clip_grad_norm_ on 2 ranks against PyTorch; the clip
    value is below every step's gradient norm, so every step clips."""
    clip = 0.05
    code = case_torch(a, tmp, 2, [], "sgd", 0.05, 0.9, True, steps=5, extra=[
        "--scheduler", "step", "--step-size", "2", "--gamma", "0.5", "--clip-grad-norm", str(clip)])
    if code != 0:
        return code
    norms = torch_json(tmp, "norms")
    assert min(norms) > clip, f"clipping did not happen at every step: norms {norms}"
    # Resumed after 3 steps on another mesh, the schedule carries on (it is
    # replayed from the step count): the losses and lrs of the unbroken run.
    common = ["--groups", "2", "--optimizer", "sgd", "--lr", "0.05", "--momentum", "0.9",
              "--scheduler", "step", "--step-size", "2", "--gamma", "0.5", "--clip-grad-norm",
              str(clip)]
    ck = os.path.join(tmp, "half")
    first, lrs1 = train(a, 2, tmp, ["--init", f"{tmp}/init.safetensors", "--steps", "3", "--save",
                                    ck] + common, with_lrs=True)
    second, lrs2 = train(a, 1, tmp, ["--resume", ck, "--steps", "2"] + common, with_lrs=True)
    close(first + second, torch_json(tmp, "losses"), 1e-10, "resumed losses vs PyTorch")
    close(lrs1 + lrs2, torch_json(tmp, "lrs"), 1e-15, "resumed lrs vs PyTorch")
    return 0


def case_autocast(a, tmp):
    """--autocast bf16: the losses stay within 2e-2 (relative) of the f32
    run's (which the torch cases check against PyTorch), on 1 rank and on 2;
    they are not the f32 losses (bf16 did run); with --dtype f64 nothing is
    lowered, as in torch, so the losses are the f64 run's exactly."""
    if not have("numpy"):
        return SKIP
    numpy_data(tmp, shape=(2, 2, 1, 32, 24))
    common = ["--base", "8", "--groups", "2", "--seed", "4", "--steps", "4", "--optimizer",
              "sgd", "--lr", "0.05", "--momentum", "0.9"]
    f32 = train(a, 1, tmp, common, dtype="f32")
    for ranks in (1, 2):
        bf16 = train(a, ranks, tmp, common + ["--autocast", "bf16"], dtype="f32")
        close(bf16, f32, 2e-2, f"{ranks} rank(s): autocast bf16 losses vs f32")
        assert any(abs(b - f) > 1e-6 * abs(f) for b, f in zip(bf16, f32)), \
            f"autocast losses equal the f32 ones: bf16 did not run ({bf16})"
    f64 = train(a, 2, tmp, common)
    close(train(a, 2, tmp, common + ["--autocast", "bf16"]), f64, 0.0,
          "--dtype f64 --autocast bf16 vs f64")
    assert f32[-1] < f32[0], f"the loss did not fall: {f32}"
    return 0


def case_ranks(a, tmp):
    if not have("numpy"):
        return SKIP
    numpy_data(tmp)
    common = ["--base", "4", "--groups", "2", "--seed", "5", "--steps", "3", "--optimizer",
              "adam", "--lr", "0.01"]
    one = train(a, 1, tmp, common)
    four = train(a, 4, tmp, ["--mesh", "2x2", "--placements", "S2,S3"] + common)
    close(four, one, 1e-11, "4 ranks vs 1")
    assert one[-1] < one[0], f"the loss did not fall: {one}"
    return 0


def case_resume(a, tmp):
    if not have("numpy"):
        return SKIP
    numpy_data(tmp)
    common = ["--groups", "2", "--optimizer", "sgd", "--lr", "0.05", "--momentum", "0.9"]
    unbroken = train(a, 1, tmp, common + ["--base", "4", "--seed", "9", "--steps", "4"])
    ck = os.path.join(tmp, "half")
    first = train(a, 4, tmp, ["--mesh", "2x2", "--placements", "S2,S3", "--base", "4", "--seed",
                              "9", "--steps", "2", "--save", ck] + common)
    second = train(a, 2, tmp, ["--placements", "S3", "--resume", ck, "--steps", "2"] + common)
    close(first + second, unbroken, 1e-11, "resumed on 2 ranks vs unbroken")
    info = run([a.ckpt, "info", ck])
    for name in ["enc1.conv1.weight", "optim.enc1.conv1.weight.momentum_buffer", "optim.step"]:
        assert name in info, f"dtensor-ckpt info does not list {name}:\n{info}"
    return 0


def write_npy_raw(path, header, data):
    raw = header.encode("latin1") + b"\n"
    with open(path, "wb") as out:
        out.write(b"\x93NUMPY\x02\x00" + struct.pack("<I", len(raw)) + raw + data)


def write_npy(path, shape, values):
    """A little-endian f8 .npy file, without numpy (these cases run without it)."""
    dims = "".join(f"{e}, " for e in shape)
    write_npy_raw(path, "{'descr': '<f8', 'fortran_order': False, 'shape': (%s), }" % dims,
                  struct.pack(f"<{len(values)}d", *values))


def plain_data(tmp, n=2, cin=2, cout=1, h=16, w=12, seed=3):
    rng = random.Random(seed)
    write_npy(f"{tmp}/x.npy", (n, cin, h, w), [rng.gauss(0, 1) for _ in range(n * cin * h * w)])
    write_npy(f"{tmp}/y.npy", (n, cout, h, w), [rng.gauss(0, 1) for _ in range(n * cout * h * w)])


def read_safetensors_raw(path):
    """name -> (dtype, shape, bytes), without numpy's help for bf16."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    return {name: (e["dtype"], e["shape"], blob[8 + n + e["data_offsets"][0]:
                                                 8 + n + e["data_offsets"][1]])
            for name, e in header.items() if name != "__metadata__"}


def write_safetensors_raw(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, (dtype, shape, data) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def case_init_bf16(a, tmp):
    """bf16 --init tensors are converted exactly: the losses equal those of
    the same values given as f64."""
    plain_data(tmp)
    common = ["--groups", "2", "--optimizer", "adam", "--lr", "0.01"]
    ck = os.path.join(tmp, "ck")
    train(a, 1, tmp, common + ["--base", "4", "--seed", "5", "--steps", "0", "--save", ck])
    run([a.ckpt, "consolidate", ck, f"{tmp}/all.safetensors"])
    f64, bf16 = {}, {}
    for name, (dtype, shape, data) in read_safetensors_raw(f"{tmp}/all.safetensors").items():
        if name.startswith("optim."):
            continue
        assert dtype == "F64", (name, dtype)
        # Each value cut to bf16 (the top 16 bits of its f32), and the same value in f64.
        values = struct.unpack(f"<{len(data) // 8}d", data)
        top = [struct.unpack("<I", struct.pack("<f", v))[0] >> 16 for v in values]
        bf16[name] = ("BF16", shape, struct.pack(f"<{len(top)}H", *top))
        cut = [struct.unpack("<f", struct.pack("<I", t << 16))[0] for t in top]
        f64[name] = ("F64", shape, struct.pack(f"<{len(cut)}d", *cut))
    write_safetensors_raw(f"{tmp}/init64.safetensors", f64)
    write_safetensors_raw(f"{tmp}/init16.safetensors", bf16)
    want = train(a, 2, tmp, common + ["--init", f"{tmp}/init64.safetensors", "--steps", "3"])
    got = train(a, 2, tmp, common + ["--init", f"{tmp}/init16.safetensors", "--steps", "3"])
    assert got == want, f"bf16 init {got} != f64 init {want}"
    return 0


def case_cli_errors(a, tmp):
    """Bad options and inputs: exit 2 with the option named, before any rank waits."""
    plain_data(tmp)
    ok = ["--data", tmp, "--base", "4", "--groups", "2", "--steps", "1", "--optimizer", "sgd",
          "--lr", "0.1"]
    cases = [
        (["--data", tmp + "/nowhere"] + ok[2:], "x.npy"),
        (ok + ["--init", "f.safetensors"], "--init"),
        ([o if o != "sgd" else "adagrad" for o in ok], "--optimizer"),
        (ok[:4] + ok[6:], "--groups"),
        (ok + ["--mesh", "3"], "--mesh"),
        (ok + ["--device", "gpu"], "--device"),
    ]
    # Damaged .npy headers: each is an error naming the file, exit 2 (a
    # megabyte of blanks crashed a std::regex matcher, a bad extent threw an
    # untyped std::stoll error).
    bad_headers = {
        "blanks": "{'descr':" + " " * 1000000 + "'<f9', 'fortran_order': False, 'shape': (1,), }",
        "extent": "{'descr': '<f8', 'fortran_order': False, 'shape': (a, 2), }",
        "negative": "{'descr': '<f8', 'fortran_order': False, 'shape': (-1,), }",
        "overflow": "{'descr': '<f8', 'fortran_order': False, 'shape': (99999999999999999999,), }",
        "descr": "{'descr': '', 'fortran_order': False, 'shape': (1,), }",
        "big-endian": "{'descr': '>f8', 'fortran_order': False, 'shape': (1,), }",
    }
    # A shape header promising more than the file holds (~800 TB here; 8e20
    # bytes overflow 64 bits): an error naming the file before anything is
    # allocated (it was std::bad_alloc, exit 3, naming nothing).
    bad_headers["huge"] = "{'descr': '<f8', 'fortran_order': False, 'shape': (1000000, 1000, 1000, 100), }"
    bad_headers["huge-overflow"] = \
        "{'descr': '<f8', 'fortran_order': False, 'shape': (100000, 100000, 100000, 100000), }"
    for name, header in bad_headers.items():
        d = os.path.join(tmp, "bad-" + name)
        os.makedirs(d)
        for f in ("x.npy", "y.npy"):
            write_npy_raw(os.path.join(d, f), header, bytes(8))
        cases.append((["--data", d] + ok[2:], d + "/x.npy"))
    # Two 'shape' keys, the bytes matching the first: NumPy would read the
    # second, this trainer read the first and trained on it.
    d = os.path.join(tmp, "bad-two-shapes")
    os.makedirs(d)
    for f, c in (("x.npy", 2), ("y.npy", 1)):
        header = ("{'descr': '<f8', 'fortran_order': False, 'shape': (2, %d, 16, 12), "
                  "'shape': (2, %d, 8, 12), }" % (c, c))
        write_npy_raw(os.path.join(d, f), header, bytes(8 * 2 * c * 16 * 12))
    cases.append((["--data", d] + ok[2:], d + "/x.npy"))
    # Empty batches (N = 0, H = 0): the mean loss was 0/0, printed as NaN, exit 0.
    for name, (n, h) in {"n0": (0, 16), "h0": (2, 0)}.items():
        d = os.path.join(tmp, "empty-" + name)
        os.makedirs(d)
        write_npy(f"{d}/x.npy", (n, 2, h, 12), [])
        write_npy(f"{d}/y.npy", (n, 1, h, 12), [])
        cases.append((["--data", d] + ok[2:], d + "/x.npy"))
    # A model past any address space (the first weight alone: 7e14 bytes):
    # was std::bad_alloc, exit 3.
    cases.append(([o if o != "4" else "10000000000000" for o in ok], "--base 10000000000000"))
    # Adam has no momentum: it was ignored.
    cases.append(([o if o != "sgd" else "adam" for o in ok] + ["--momentum", "0.9"], "--momentum"))
    # Options the optimiser or the scheduler would not read.
    cases.append((ok + ["--amsgrad"], "--amsgrad"))
    cases.append(([o if o != "sgd" else "adamw" for o in ok] + ["--momentum", "0.9"], "--momentum"))
    cases.append((ok + ["--step-size", "2"], "--step-size"))
    cases.append((ok + ["--scheduler", "linear", "--t-max", "2"], "--t-max"))
    cases.append((ok + ["--scheduler", "cosine"], "--t-max"))
    cases.append((ok + ["--scheduler", "step"], "--step-size"))
    cases.append((ok + ["--scheduler", "linear", "--start-factor", "0"], "--start-factor"))
    cases.append((ok + ["--autocast", "fp8"], "--autocast"))
    for args, named in cases:
        r = subprocess.run([a.run, "-n", "2", "--", a.trainer] + args, capture_output=True,
                           text=True, timeout=120)
        out = r.stdout + r.stderr
        assert r.returncode == 2, f"{args}: exit {r.returncode}, expected 2\n{out}"
        assert named in out, f"{args}: the message does not name {named}:\n{out}"
    return 0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("case")
    p.add_argument("--run", required=True)
    p.add_argument("--trainer", required=True)
    p.add_argument("--ckpt", required=True)
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if a.case == "torch-1rank-sgd":
            return case_torch(a, tmp, 1, [], "sgd", 0.05, 0.9, False)
        if a.case == "torch-2x2-sgd-consolidate":
            return case_torch(a, tmp, 4, ["--mesh", "2x2", "--placements", "S2,S3"], "sgd", 0.05,
                              0.9, True)
        if a.case == "torch-2-sgd-f32":
            return case_torch(a, tmp, 2, [], "sgd", 0.05, 0.9, False, "f32")
        if a.case == "torch-2-adam":
            return case_torch(a, tmp, 2, [], "adam", 0.01, 0, False)
        if a.case == "torch-1rank-rmsprop-cosine":
            return case_torch(a, tmp, 1, [], "rmsprop", 0.002, 0.9, True, steps=5, extra=[
                "--weight-decay", "0.01", "--scheduler", "cosine", "--t-max", "3",
                "--eta-min", "0.0005"])
        if a.case == "torch-2x2-adamw-amsgrad-groups-linear":
            return case_torch(a, tmp, 4, ["--mesh", "2x2", "--placements", "S2,S3"], "adamw", 0.01,
                              0, True, steps=5, extra=[
                                  "--weight-decay", "0.1", "--amsgrad", "--no-decay-norm-bias",
                                  "--scheduler", "linear", "--start-factor", "0.5",
                                  "--total-iters", "3"])
        if a.case == "torch-2-sgd-step-clip":
            return case_clip(a, tmp)
        if a.case == "autocast-bf16":
            return case_autocast(a, tmp)
        if a.case == "ranks-4-vs-1":
            return case_ranks(a, tmp)
        if a.case == "init-bf16":
            return case_init_bf16(a, tmp)
        if a.case == "cli-errors":
            return case_cli_errors(a, tmp)
        if a.case == "resume-resharded":
            return case_resume(a, tmp)
    sys.exit(f"unknown case {a.case}")


if __name__ == "__main__":
    sys.exit(main())
