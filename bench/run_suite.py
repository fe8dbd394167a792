#!/usr/bin/env python3
"""The benchmark suite (not a test): libdtensor's convolution layers at P = 1
and 2, the window operators (pools, pad, padding modes, transposed
convolution) at P = 2 (one OpenMP thread per rank, each rank bound to its own cores; P = 4,
two ranks per core, for the 3x3 64-channel layers), against the local kernel
on the same per-rank window, against PyTorch DTensor when it is installed, and
against the machine's FMA peak; plus a growth sweep of image size, and
checkpoint save/load throughput against the disk's raw write+fsync speed, and a
U-Net training step at P = 2 against the same step on one process.
Everything in one run.

  python3 bench/run_suite.py [--build build] [--torch-python /opt/torchbench/bin/python]
                             [--quick] [--out docs]

Writes docs/benchmarks.md (tables, the command and the machine),
docs/benchmarks.json (for comparison between commits) and docs/benchmarks.png.
"""
import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# name, input N,C,(D,)H,W, out channels, kernel, stride, padding, groups, torch-comparable
LAYERS = [
    ("ResNet stem k7 s2 p3 3->64 512^2", "1,3,512,512", 64, 7, 2, 3, 1, False),
    ("3x3 64->64 256^2", "1,64,256,256", 64, 3, 1, 1, 1, True),
    ("3x3 64->64 512^2", "1,64,512,512", 64, 3, 1, 1, 1, True),
    ("depthwise k7 p3 128ch 256^2", "1,128,256,256", 128, 7, 1, 3, 128, True),
    ("downsample k4 s4 64->128 512^2", "1,64,512,512", 128, 4, 4, 0, 1, True),
    ("3-D 3x3x3 32->32 64^3", "1,32,64,64,64", 32, 3, 1, 1, 1, False),
]


# The window operators at P = 2, sharded on W: name, dtensor-op arguments,
# torch_dtensor_op.py arguments (None: PyTorch has no such op to compare).
WINDOW_OPS = [
    ("max_pool k3 s2 p1 32ch 256^2", ["max_pool", "--input", "2,32,256,256", "--kernel", "3",
     "--stride", "2", "--padding", "1"],
     ["max_pool", "--input", "2,32,256,256", "--kernel", "3", "--stride", "2", "--padding", "1"]),
    ("avg_pool k2 s2 32ch 256^2", ["avg_pool", "--input", "2,32,256,256", "--kernel", "2"],
     ["avg_pool", "--input", "2,32,256,256", "--kernel", "2"]),
    ("adaptive_avg_pool 32ch 256^2 -> 7^2", ["adaptive_avg_pool", "--input", "2,32,256,256",
     "--output-size", "7"], ["adaptive_avg_pool", "--input", "2,32,256,256", "--output-size", "7",
                             "7"]),
    ("adaptive_max_pool 32ch 256^2 -> 7^2", ["adaptive_max_pool", "--input", "2,32,256,256",
     "--output-size", "7"], None),
    ("pad reflect 2 32ch 256^2", ["pad", "--input", "2,32,256,256", "--padding-lr", "2:2",
     "--mode", "reflect"], ["pad", "--input", "2,32,256,256", "--padding", "2", "--mode",
                            "reflect"]),
    ("conv reflect 3x3 32->32 256^2", ["conv", "--input", "1,32,256,256", "--kernel", "3",
     "--padding", "1", "--padding-mode", "reflect"], None),
    ("conv_transpose k2 s2 64->32 128^2", ["conv_transpose", "--input", "1,64,128,128",
     "--out-channels", "32", "--kernel", "2", "--stride", "2"],
     ["conv_transpose", "--input", "1,64,128,128", "--out-channels", "32", "--kernel", "2",
      "--stride", "2"]),
    ("conv_transpose k3 s2 p1 64->32 128^2", ["conv_transpose", "--input", "1,64,128,128",
     "--out-channels", "32", "--kernel", "3", "--stride", "2", "--padding", "1",
     "--output-padding", "1"], None),
    ("upsample nearest x2 32ch 128^2", ["upsample", "--input", "2,32,128,128", "--mode", "nearest",
     "--scale", "2"], ["upsample", "--input", "2,32,128,128", "--scale", "2"]),
    ("upsample bilinear x2 32ch 128^2", ["upsample", "--input", "2,32,128,128", "--mode",
     "linear", "--scale", "2"], ["upsample", "--input", "2,32,128,128", "--scale", "2",
                                 "--mode-up", "bilinear"]),
    # The norms without weight and bias on both sides: the PyTorch script
    # calls them so (a layer_norm weight is as large as a sample).
    ("group_norm 8 groups 32ch 256^2", ["group_norm", "--input", "2,32,256,256", "--num-groups",
     "8", "--no-affine"], ["group_norm", "--input", "2,32,256,256", "--num-groups", "8"]),
    ("batch_norm train 32ch 256^2", ["batch_norm", "--input", "2,32,256,256", "--no-affine"],
     ["batch_norm", "--input", "2,32,256,256"]),
    ("layer_norm 32ch 256^2", ["layer_norm", "--input", "2,32,256,256", "--no-affine"],
     ["layer_norm", "--input", "2,32,256,256"]),
    ("cat 2x32ch 256^2 on dim 1", ["cat", "--input", "2,32,256,256", "--inputs", "2"], None),
    ("gelu 32ch 256^2", ["gelu", "--input", "2,32,256,256"], ["gelu", "--input", "2,32,256,256"]),
    ("silu 32ch 256^2", ["silu", "--input", "2,32,256,256"], ["silu", "--input", "2,32,256,256"]),
    ("mse_loss 32ch 256^2", ["mse_loss", "--input", "2,32,256,256"],
     ["mse_loss", "--input", "2,32,256,256"]),
]


def progress(msg):
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def run_json(cmd, env):
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    lines = [l for l in out.stdout.splitlines() if l.strip()]
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"{shlex.join(cmd)} failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    last = lines[-1]
    return json.loads(last[last.index("{"):])


def conv_args(layer, extra_placement):
    name, inp, oc, k, s, p, g, _ = layer
    nsp = len(inp.split(",")) - 2
    return ["--input", inp, "--out-channels", str(oc), "--kernel", str(k), "--stride", str(s),
            "--padding", str(p), "--groups", str(g), "--placements", extra_placement]


def libdtensor(build, layer, P, dtype, iters, env):
    nsp = len(layer[1].split(",")) - 2
    placement = f"S{1 + nsp}"  # the last spatial dim (W), like PyTorch's Shard(3)
    cmd = [os.path.join(build, "bin", "dtensor-run"), "-n", str(P), "--bind-cores", "--",
           os.path.join(build, "bin", "dtensor-conv")] + conv_args(layer, placement) + [
               "--dtype", dtype, "--backward", "--bench", "--iters", str(iters), "--warmup", "2",
               "--json"]
    return run_json(cmd, env)


def torch_peer(py, layer, P, iters, env):
    name, inp, oc, k, s, p, g, ok = layer
    cmd = [py, os.path.join(ROOT, "bench", "torch_dtensor_conv.py"), "-n", str(P), "--input", inp,
           "--out-channels", str(oc), "--kernel", str(k), "--stride", str(s), "--padding", str(p),
           "--groups", str(g), "--iters", str(iters), "--bind-cores"]
    return run_json(cmd, env)


def window_op(build, args, iters, env):
    cmd = [os.path.join(build, "bin", "dtensor-run"), "-n", "2", "--bind-cores", "--",
           os.path.join(build, "bin", "dtensor-op")] + args + [
               "--backward", "--bench", "--iters", str(iters), "--warmup", "2", "--json"]
    return run_json(cmd, env)


def checkpoint_io(build, P, mb, reps, env):
    cmd = [os.path.join(build, "bin", "dtensor-run"), "-n", str(P), "--",
           os.path.join(build, "bin", "dtensor-bench-checkpoint"), "--mb", str(mb), "--reps",
           str(reps), "--json"]
    return run_json(cmd, env)


def unet_step(build, P, shape, iters, env):
    cmd = [os.path.join(build, "bin", "dtensor-run"), "-n", str(P), "--bind-cores", "--",
           os.path.join(build, "bin", "dtensor-bench-unet-step"), "--input", shape, "--iters",
           str(iters), "--warmup", "2", "--json"]
    return run_json(cmd, env)


def training_rows(build, quick, env):
    """The U-Net step at P = 2 against one process running one rank's shard
    (half of H) alone, and against the whole batch on one process; the runs
    alternate, and each keeps its fastest median."""
    rows = []
    for n, c, h, w in [(2, 8, 128, 128)] if quick else [(2, 8, 128, 128), (2, 8, 256, 256)]:
        best = {}
        for _ in range(2 if quick else 3):
            for key, P, shape in (("p2", 2, f"{n},{c},{h},{w}"), ("shard", 1, f"{n},{c},{h // 2},{w}"),
                                  ("whole", 1, f"{n},{c},{h},{w}")):
                progress(f"U-Net step {key} {shape}")
                r = unet_step(build, P, shape, 3 if quick else 5, env)
                if key not in best or r["step_ms"] < best[key]["step_ms"]:
                    best[key] = r
        rows.append({"input": f"{n},{c},{h},{w}", "base": best["p2"]["base"],
                     "p2_step_ms": best["p2"]["step_ms"], "p2_fwd_ms": best["p2"]["fwd_ms"],
                     "p2_bwd_ms": best["p2"]["bwd_ms"],
                     "shard_step_ms": best["shard"]["step_ms"],
                     "whole_step_ms": best["whole"]["step_ms"],
                     "overhead": best["p2"]["step_ms"] / best["shard"]["step_ms"],
                     "speedup": best["whole"]["step_ms"] / best["p2"]["step_ms"]})
    return rows


def local_op(build, args, iters, env):
    """dtensor-op on one rank, one thread: the operator's local kernel."""
    cmd = [os.path.join(build, "bin", "dtensor-run"), "-n", "1", "--bind-cores", "--",
           os.path.join(build, "bin", "dtensor-op")] + args + [
               "--backward", "--bench", "--iters", str(iters), "--warmup", "2", "--json"]
    return run_json(cmd, env)


def torch_local_op(py, args, iters, env):
    """PyTorch's own kernel for the same operator, shape and thread count."""
    cmd = [py, os.path.join(ROOT, "bench", "torch_dtensor_op.py"), "--local", "--threads", "1"] + \
        args + ["--iters", str(iters), "--bind-cores"]
    return run_json(cmd, env)


def torch_window_op(py, args, iters, env):
    cmd = [py, os.path.join(ROOT, "bench", "torch_dtensor_op.py"), "-n", "2"] + args + [
        "--iters", str(iters), "--bind-cores"]
    return run_json(cmd, env)


def machine():
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{cpu}, {os.cpu_count()} cores, {platform.system()} {platform.release()}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--torch-python", default="")
    ap.add_argument("--quick", action="store_true", help="fewer iterations and sizes")
    ap.add_argument("--out", default=os.path.join(ROOT, "docs"))
    ap.add_argument("--sections", default="layers,window,kernels,growth,checkpoint,training",
                    help="which parts to run (comma-separated): layers, window, kernels, "
                    "growth, checkpoint, training")
    args = ap.parse_args()
    env = dict(os.environ, OMP_NUM_THREADS="1", DTENSOR_LOG_LEVEL="warn")
    iters = 3 if args.quick else 8
    results = {"machine": machine(), "command": shlex.join([sys.executable] + sys.argv),
               "date": time.strftime("%Y-%m-%d %H:%M"), "layers": [], "growth": []}
    sections = set(args.sections.split(","))
    # Sections not run this time keep their last results (and say when).
    previous = os.path.join(args.out, "benchmarks.json")
    every = {"layers", "window", "kernels", "growth", "checkpoint", "training"}
    if sections != every and os.path.exists(previous):
        with open(previous) as f:
            old = json.load(f)
        for key, section in (("layers", "layers"), ("growth", "growth"), ("window_ops", "window"),
                             ("kernels", "kernels"), ("checkpoint", "checkpoint"),
                             ("training", "training")):
            if section not in sections and key in old:
                results[key] = old[key]
                # A section kept before keeps the date of the run that measured it.
                results.setdefault("kept_from", {})[section] = old.get("kept_from", {}).get(
                    section, old.get("date"))

    # The layers' % peak columns divide by the peak of the run that measured
    # them: kept layers keep their run's peak (the same CPU model name has
    # shown peaks 2x apart on different hosts).
    if "layers" in results.get("kept_from", {}):
        for key in ("fma_peak_gflops_f32", "dot_peak_gflops_bf16"):
            if key in old:
                results[key] = old[key]
    else:
        progress("FMA peak")
        peak = run_json([os.path.join(args.build, "bin", "dtensor-bench-fma"), "--seconds", "2"],
                        env)
        results["fma_peak_gflops_f32"] = peak["fma_peak_gflops_f32"]
        if peak.get("dot_peak_gflops_bf16"):
            results["dot_peak_gflops_bf16"] = peak["dot_peak_gflops_bf16"]

    for layer in LAYERS if "layers" in sections else []:
        # P = 4 oversubscribes a 2-core machine (two ranks per core): reported for
        # the 3x3 64-channel layers, not targeted.
        for P in (1, 2, 4) if layer[0].startswith("3x3 64->64") else (1, 2):
            for dtype in ("f32", "bf16") if layer[1] == "1,64,256,256" and P <= 2 else ("f32",):
                progress(f"{layer[0]} P={P} {dtype}")
                r = libdtensor(args.build, layer, P, dtype, iters, env)
                row = {"layer": layer[0], "P": P, "dtype": dtype, **{k: r.get(k) for k in (
                    "fwd_ms", "bwd_ms", "local_fwd_ms", "local_bwd_ms", "overhead_fwd",
                    "overhead_bwd", "gflops_fwd", "gflops_bwd", "halo_bytes_sent_per_rank",
                    "peak_rss_mb", "passes_peak_rss_mb", "tensor_mb", "rss_ratio",
                    "rss_ratio_net", "rss_ratio_private")}}
                if args.torch_python and layer[7] and P >= 2 and dtype == "f32":
                    progress(f"{layer[0]} P={P} PyTorch DTensor")
                    try:
                        t = torch_peer(args.torch_python, layer, P, iters, env)
                        row["torch_fwd_ms"], row["torch_bwd_ms"] = t["fwd_ms"], t["bwd_ms"]
                        row["torch_version"] = t["torch_version"]
                    except Exception as e:  # the peer is optional: record why it is missing
                        row["torch_error"] = str(e).splitlines()[0][:200]
                results["layers"].append(row)

    if "window" in sections:
        results["window_ops"] = []
    for name, op_args, torch_args in WINDOW_OPS if "window" in sections else []:
        progress(f"{name} P=2")
        r = window_op(args.build, op_args, iters, env)
        row = {"op": name, **{k: r.get(k) for k in (
            "fwd_ms", "bwd_ms", "local_fwd_ms", "local_bwd_ms", "overhead_fwd", "overhead_bwd",
            "halo_bytes_sent_per_rank")}}
        if args.torch_python and torch_args:
            progress(f"{name} P=2 PyTorch DTensor")
            try:
                t = torch_window_op(args.torch_python, torch_args, iters, env)
                row["torch_fwd_ms"], row["torch_bwd_ms"] = t["fwd_ms"], t["bwd_ms"]
                row["torch_version"] = t["torch_version"]
                row["torch_output_placements"] = t.get("output_placements")
                if t.get("bwd_error"):
                    row["torch_error"] = t["bwd_error"]
            except Exception as e:
                row["torch_error"] = str(e).splitlines()[0][:200]
        results["window_ops"].append(row)

    # Each operator's local kernel (one rank, one thread) against PyTorch's on
    # the same shape and thread count, forward + backward.
    if "kernels" in sections:
        results["kernels"] = []
    for name, op_args, torch_args in WINDOW_OPS if "kernels" in sections else []:
        if not torch_args:
            continue
        progress(f"{name} local kernel")
        r = local_op(args.build, op_args, iters, env)
        row = {"op": name, "fwd_ms": r.get("fwd_ms"), "bwd_ms": r.get("bwd_ms")}
        if args.torch_python:
            progress(f"{name} PyTorch local kernel")
            try:
                t = torch_local_op(args.torch_python, torch_args, iters, env)
                row["torch_fwd_ms"], row["torch_bwd_ms"] = t["fwd_ms"], t["bwd_ms"]
                row["torch_version"] = t["torch_version"]
                if t.get("bwd_error"):
                    row["torch_error"] = t["bwd_error"]
            except Exception as e:
                row["torch_error"] = str(e).splitlines()[0][:200]
        results["kernels"].append(row)

    sizes = [128, 256, 512] if args.quick else [128, 256, 512, 768, 1024]
    for size in sizes if "growth" in sections else []:
        progress(f"growth 3x3 64->64 {size}^2 P=2")
        layer = ("growth", f"1,64,{size},{size}", 64, 3, 1, 1, 1, False)
        r = libdtensor(args.build, layer, 2, "f32", max(2, iters // 2), env)
        results["growth"].append({k: r.get(k) for k in (
            "fwd_ms", "bwd_ms", "halo_bytes_sent_per_rank", "peak_rss_mb", "passes_peak_rss_mb",
            "tensor_mb", "rss_ratio", "rss_ratio_net", "rss_ratio_private")} | {"size": size})

    if "checkpoint" in sections:
        results["checkpoint"] = []
    for P in (1, 2) if "checkpoint" in sections else []:
        progress(f"checkpoint save/load P={P}")
        results["checkpoint"].append(checkpoint_io(args.build, P, 64 if args.quick else 256, 3, env))

    if "training" in sections:
        results["training"] = training_rows(args.build, args.quick, env)

    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "benchmarks.json"), "w") as f:
        json.dump(results, f, indent=1)
    write_markdown(results, os.path.join(args.out, "benchmarks.md"))
    plot(results, os.path.join(args.out, "benchmarks.png"))
    progress("done")


def fmt(v, spec=".1f"):
    return "—" if v is None else format(v, spec)


def rss(r):
    """'RSS / tensors | ratio (net) | private' cells."""
    return (f"{fmt(r.get('passes_peak_rss_mb'), '.0f')} / {fmt(r.get('tensor_mb'), '.0f')} | "
            f"{fmt(r.get('rss_ratio'), '.2f')} ({fmt(r.get('rss_ratio_net'), '.2f')}) | "
            f"{fmt(r.get('rss_ratio_private'), '.2f')}")


def write_markdown(res, path):
    peak = res["fma_peak_gflops_f32"]
    L = ["# Benchmarks", "",
         f"Measured {res['date']} on {res['machine']} with `{res['command']}`: one OpenMP "
         "thread per rank, each rank bound to its own cores (`dtensor-run --bind-cores`; the "
         "PyTorch script binds its ranks alike), medians. Ratios are measured side by side in the same run. "
         f"FMA peak per core (f32): **{peak:.0f} GFLOP/s** (`dtensor-bench-fma`)" +
         (f"; bf16 dot-product peak (AVX512-BF16, two multiply-adds per f32 lane): "
          f"**{res['dot_peak_gflops_bf16']:.0f} GFLOP/s**, the peak of the bf16 rows"
          if res.get("dot_peak_gflops_bf16") else "") +
         (", both from the layers section's run" if "layers" in res.get("kept_from", {}) else "")
         + "." + "".join(
             f" The {s} section is from the run of {d}." for s, d in res.get("kept_from", {}).items()),
         "",
         "## Layers", "",
         "overhead = distributed time / local kernel alone on the same per-rank window; "
         "% peak = forward GFLOP/s per rank / FMA peak; vs torch = PyTorch DTensor time / "
         "libdtensor time (forward + backward). RSS = peak resident set of a rank over its first "
         "forward + backward (before the timed runs) against the tensors it must hold (input, "
         "received halo, weights, output, grad_output, gradients): raw, and net of the process's "
         "resident set before any tensor existed. private = the peak of the same passes run a "
         "second time, less mapped files (library code, shared by the ranks of a machine and "
         "paged in by the first passes), over the private memory before any tensor existed: "
         "what a rank holds step after step (docs/cli.md). P = 4 runs two ranks on each of the 2 "
         "cores (reported, not targeted): its % peak is per rank, so 50% fills a core.", "",
         "| layer | P | dtype | fwd ms | bwd ms | overhead fwd | overhead bwd | GFLOP/s fwd | % peak | halo bytes/rank | RSS MB / tensors MB | RSS ratio (net) | private | vs torch |",
         "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in res["layers"]:
        per_rank = (r["gflops_fwd"] or 0) / r["P"]
        # bf16 convolutions run dot products of bf16 pairs: their own peak.
        row_peak = res.get("dot_peak_gflops_bf16", peak) if r["dtype"] == "bf16" else peak
        vs = "—"
        if r.get("torch_fwd_ms"):
            vs = f"{(r['torch_fwd_ms'] + r['torch_bwd_ms']) / (r['fwd_ms'] + r['bwd_ms']):.2f}x"
        elif r.get("torch_error"):
            vs = "failed"
        L.append(f"| {r['layer']} | {r['P']} | {r['dtype']} | {fmt(r['fwd_ms'])} | {fmt(r['bwd_ms'])} | "
                 f"{fmt(r['overhead_fwd'], '.3f')} | {fmt(r['overhead_bwd'], '.3f')} | "
                 f"{fmt(r['gflops_fwd'])} | {100 * per_rank / row_peak:.0f}% | "
                 f"{r['halo_bytes_sent_per_rank']} | {rss(r)} | {vs} |")
    L += ["", "## Window and U-Net operators (P = 2, W sharded, f32)", "",
          "overhead = distributed time / the same operator on the rank's own shard alone "
          "(a one-rank mesh), forward and backward, measured interleaved; vs torch = PyTorch "
          "DTensor time / libdtensor time (forward + backward) on the same input placed "
          "Shard(3): PyTorch shards pooling on batch and channel only, so it redistributes; "
          "the norms on both sides without weight and bias.", "",
          "| operator | fwd ms | bwd ms | overhead fwd | overhead bwd | halo bytes/rank | vs torch |",
          "|---|---|---|---|---|---|---|"]
    for r in res.get("window_ops", []):
        vs = "—"
        if r.get("torch_fwd_ms") and r.get("torch_bwd_ms"):
            vs = f"{(r['torch_fwd_ms'] + r['torch_bwd_ms']) / (r['fwd_ms'] + r['bwd_ms']):.2f}x"
        elif r.get("torch_fwd_ms"):
            vs = f"fwd {r['torch_fwd_ms'] / r['fwd_ms']:.2f}x (bwd failed)"
        elif r.get("torch_error"):
            vs = "failed"
        L.append(f"| {r['op']} | {fmt(r['fwd_ms'], '.2f')} | {fmt(r['bwd_ms'], '.2f')} | "
                 f"{fmt(r['overhead_fwd'], '.3f')} | {fmt(r['overhead_bwd'], '.3f')} | "
                 f"{r['halo_bytes_sent_per_rank']} | {vs} |")
    if res.get("kernels"):
        L += ["", "## Local kernels against PyTorch's (1 rank, 1 thread, f32)", "",
              "Each operator's forward and backward on one rank with one OpenMP thread "
              "(`dtensor-op OP --bench` under `dtensor-run -n 1`) against PyTorch running "
              "the same torch.nn.functional call on a plain tensor of the same shape with "
              "one thread (`bench/torch_dtensor_op.py --local`); the norms on both sides "
              "without weight and bias; vs torch = PyTorch time / "
              "libdtensor time, forward and backward apart and together.", "",
              "| operator | fwd ms | bwd ms | torch fwd ms | torch bwd ms | vs torch fwd | "
              "vs torch bwd | vs torch |",
              "|---|---|---|---|---|---|---|---|"]
        for r in res["kernels"]:
            tf, tb = r.get("torch_fwd_ms"), r.get("torch_bwd_ms")
            vf = f"{tf / r['fwd_ms']:.2f}x" if tf and r.get("fwd_ms") else "—"
            vb = f"{tb / r['bwd_ms']:.2f}x" if tb and r.get("bwd_ms") else "—"
            vt = (f"{(tf + tb) / (r['fwd_ms'] + r['bwd_ms']):.2f}x"
                  if tf and tb and r.get("fwd_ms") and r.get("bwd_ms") else "—")
            L.append(f"| {r['op']} | {fmt(r['fwd_ms'], '.2f')} | {fmt(r['bwd_ms'], '.2f')} | "
                     f"{fmt(tf, '.2f')} | {fmt(tb, '.2f')} | {vf} | {vb} | {vt} |")
    L += ["", "## Growth (3x3 64->64, P = 2)", "",
          "| image | fwd ms | bwd ms | halo bytes/rank | RSS MB / tensors MB | RSS ratio (net) | private |",
          "|---|---|---|---|---|---|---|"]
    for g in res["growth"]:
        L.append(f"| {g['size']}^2 | {fmt(g['fwd_ms'])} | {fmt(g['bwd_ms'])} | "
                 f"{g['halo_bytes_sent_per_rank']} | {rss(g)} |")
    if res.get("checkpoint"):
        L += ["", "## Checkpoints (one f32 tensor, Shard(0))", "",
              "Save and load throughput (bytes / wall time, medians) next to the disk's raw "
              "speed on the same bytes in the same run: each rank writes its share to a plain "
              "file and fsyncs it (raw write), and preads it back (raw read; both reads come "
              "mostly from the page cache). `dtensor-bench-checkpoint`, docs/checkpoints.md.", "",
              "| P | MB | save MB/s | raw write MB/s | save / raw | load MB/s | raw read MB/s | load / raw |",
              "|---|---|---|---|---|---|---|---|"]
        for c in res["checkpoint"]:
            L.append(f"| {c['P']} | {fmt(c['mb'], '.0f')} | {fmt(c['save_mb_s'])} | "
                     f"{fmt(c['raw_write_mb_s'])} | {fmt(c['save_vs_raw_write'], '.2f')} | "
                     f"{fmt(c['load_mb_s'])} | {fmt(c['raw_read_mb_s'])} | "
                     f"{fmt(c['load_vs_raw_read'], '.2f')} |")
    if res.get("training"):
        L += ["", "## U-Net training step (P = 2, H sharded; target overhead <= 1.15)", "",
              "One step of `dtensor-train-unet`'s model (forward, backward, SGD with momentum; "
              "base 16, f32) at P = 2 against one process running one rank's shard (half of H) "
              "alone (overhead) and the whole batch (speedup). Fastest median of alternating "
              "runs. `dtensor-bench-unet-step`, docs/training.md.", "",
              "| input | P=2 step ms (fwd / bwd) | shard alone ms | whole on 1 ms | overhead | speedup |",
              "|---|---|---|---|---|---|"]
        for t in res["training"]:
            L.append(f"| {t['input']} | {fmt(t['p2_step_ms'])} ({fmt(t['p2_fwd_ms'])} / "
                     f"{fmt(t['p2_bwd_ms'])}) | {fmt(t['shard_step_ms'])} | "
                     f"{fmt(t['whole_step_ms'])} | {fmt(t['overhead'], '.3f')} | "
                     f"{fmt(t['speedup'], '.2f')} |")
    L += ["", "![growth](benchmarks.png)", ""]
    with open(path, "w") as f:
        f.write("\n".join(L))


def plot(res, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        progress("matplotlib missing: no plot")
        return
    g = res["growth"]
    if not g:
        return
    px = [x["size"] ** 2 / 1e6 for x in g]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    axes[0].plot(px, [x["fwd_ms"] for x in g], "o-", label="forward")
    axes[0].plot(px, [x["bwd_ms"] for x in g], "s-", label="backward")
    axes[0].set(xlabel="megapixels", ylabel="ms", title="time vs pixels")
    axes[0].legend()
    axes[1].plot([x["size"] for x in g], [x["halo_bytes_sent_per_rank"] / 1024 for x in g], "o-")
    axes[1].set(xlabel="image edge", ylabel="KiB", title="halo bytes per rank vs edge")
    axes[2].plot(px, [x["passes_peak_rss_mb"] for x in g], "o-", label="peak RSS")
    axes[2].plot(px, [x["tensor_mb"] for x in g], "s--", label="tensors held")
    axes[2].set(xlabel="megapixels", ylabel="MB", title="peak RSS vs pixels (fwd + bwd)")
    axes[2].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    main()
