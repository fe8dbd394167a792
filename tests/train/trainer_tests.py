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


def train(a, ranks, data, extra):
    out = run([a.run, "-n", str(ranks), "--", a.trainer, "--data", data, "--dtype", "f64",
               "--json"] + extra)
    last = out.strip().splitlines()[-1]
    j = json.loads(last[last.index("{"):])  # after dtensor-run's "[0] " prefix
    assert j["steps"] == len(j["losses"]), last
    return j["losses"]


def close(got, want, rel, what):
    assert len(got) == len(want), f"{what}: {len(got)} values, {len(want)} expected"
    for i, (g, w) in enumerate(zip(got, want)):
        if abs(g - w) > rel * max(1.0, abs(w)):
            sys.exit(f"{what}[{i}]: {g!r} differs from {w!r} by more than {rel}")


def reference(tmp, **kw):
    args = [sys.executable, os.path.join(HERE, "unet_torch_reference.py"), "--out", tmp]
    for k, v in kw.items():
        args += [f"--{k}", str(v)]
    run(args)
    with open(os.path.join(tmp, "torch_losses.json")) as f:
        return json.load(f)


def numpy_data(tmp, shape=(2, 2, 1, 16, 12), seed=3):
    import numpy as np
    rng = np.random.default_rng(seed)
    n, cin, cout, h, w = shape
    np.save(f"{tmp}/x.npy", rng.standard_normal((n, cin, h, w)))
    np.save(f"{tmp}/y.npy", rng.standard_normal((n, cout, h, w)))


def case_torch(a, tmp, ranks, mesh_args, optimizer, lr, momentum, consolidate):
    if not have("torch"):
        print("SKIPPED: python3 cannot import torch")
        return SKIP
    want = reference(tmp, steps=4, optimizer=optimizer, lr=lr, momentum=momentum)
    ckpt = os.path.join(tmp, "ckpt")
    got = train(a, ranks, tmp, mesh_args + [
        "--init", f"{tmp}/init.safetensors", "--groups", "2", "--steps", "4", "--optimizer",
        optimizer, "--lr", str(lr), "--momentum", str(momentum), "--save", ckpt])
    close(got, want, 1e-10, "losses vs PyTorch")
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


def case_cli_errors(a, tmp):
    """Bad options and inputs: exit 2 with the option named, before any rank waits."""
    if not have("numpy"):
        return SKIP
    numpy_data(tmp)
    ok = ["--data", tmp, "--base", "4", "--groups", "2", "--steps", "1", "--optimizer", "sgd",
          "--lr", "0.1"]
    cases = [
        (["--data", tmp + "/nowhere"] + ok[2:], "x.npy"),
        (ok + ["--init", "f.safetensors"], "--init"),
        ([o if o != "sgd" else "rmsprop" for o in ok], "--optimizer"),
        (ok[:4] + ok[6:], "--groups"),
        (ok + ["--mesh", "3"], "--mesh"),
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
    for name, header in bad_headers.items():
        d = os.path.join(tmp, "bad-" + name)
        os.makedirs(d)
        raw = header.encode("latin1") + b"\n"
        for f in ("x.npy", "y.npy"):
            with open(os.path.join(d, f), "wb") as out:
                out.write(b"\x93NUMPY\x02\x00" + struct.pack("<I", len(raw)) + raw + bytes(8))
        cases.append((["--data", d] + ok[2:], d + "/x.npy"))
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
        if a.case == "torch-2-adam":
            return case_torch(a, tmp, 2, [], "adam", 0.01, 0, False)
        if a.case == "ranks-4-vs-1":
            return case_ranks(a, tmp)
        if a.case == "cli-errors":
            return case_cli_errors(a, tmp)
        if a.case == "resume-resharded":
            return case_resume(a, tmp)
    sys.exit(f"unknown case {a.case}")


if __name__ == "__main__":
    sys.exit(main())
