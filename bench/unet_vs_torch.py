#!/usr/bin/env python3
"""The trainer's U-Net step against PyTorch's on the same cores, timed from
outside as a user would: the wall-clock difference between whole runs of
different --steps (so start-up, reading the data and the first step's
allocations cancel), the two programs interleaved run by run, medians.

  python3 bench/unet_vs_torch.py --build build --python /path/to/venv/bin/python3 \
      [--sizes 2x8x128x128,2x8x256x256,1x16x512x512] [--steps 5,85] [--reps 3] [--json out.json]

Rows, each side by side in the same run (f32, SGD momentum 0.9, --base 16
--groups 4, y with one channel):
  1 rank, 1 thread (taskset on one core)     vs PyTorch, 1 process, 1 thread
  P = 2, H sharded (--placements S2) under dtensor-run -n 2 --bind-cores,
  OMP_NUM_THREADS=1                          vs PyTorch, 1 process, 2 threads (NCHW and
                                                channels_last), and DDP on 2 ranks
and minor page faults per step of the 1-rank run (the same difference of
whole runs, from the kernel's count for the child: getrusage).
--python names the interpreter with PyTorch (a venv; it is not a dependency
of the project); its version is printed with the results.

With --sim-link SPEC (e.g. latency_us=500,gbit=10; docs/performance.md,
"Slow links, simulated") it times libdtensor alone, no PyTorch needed: for
each of --sizes, dtensor-bench-unet-step at P = 2 with DTENSOR_SIM_LINK=SPEC,
the same without it, and one rank's shard (half of H) trained alone on one
process; the step-time medians, the overhead of P = 2 against the shard alone
(with and without the link), and how much the link adds.

With --overhead it times libdtensor alone too, the trainer from outside as
above (no PyTorch needed): for each of --sizes, P = 2 under dtensor-run
(H sharded, ranks bound), one rank's shard (half of H) trained alone on one
core, and two such shards trained at once, one on each core, with no
communication at all (the wall time until both have finished). The last is
the floor for P = 2 on this machine: what running two processes side by side
costs (shared caches and memory, the slower core setting the pace) before
any message. Rows: the medians, P = 2 and the two shards against the shard
alone, and P = 2 against the two shards (what the library itself adds);
where the batch has a sample per rank, also P = 2 with the batch split
instead (--placements S0: data parallel, the same work per rank as the
shard alone, no halos) and the H split against it; and P = 2 with the batch
split on twice the batch at half the height (--placements S0 on 2N x C x H/2
x W: each rank trains exactly the shard's shape), which has every cost of
P = 2 (the groups, the gradients' all-reduce, the agreement checks, the
ranks meeting) but the H split's own (halos, recomputed rows, statistics
across ranks), and the H split against it.
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def make_data(root, shape):
    import numpy as np

    n, c, h, w = shape
    d = os.path.join(root, "x".join(str(v) for v in shape))
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(0)
    np.save(os.path.join(d, "x.npy"), rng.standard_normal((n, c, h, w)).astype(np.float32))
    np.save(os.path.join(d, "y.npy"), rng.standard_normal((n, 1, h, w)).astype(np.float32))
    return d


def add_row(results, row):
    """Prints `row` as a JSON line and keeps it for save()."""
    results["rows"].append(row)
    print(json.dumps(row), flush=True)


def save(results, path):
    """Writes every row to `path` (--json) when given; the exit status."""
    if path:
        with open(path, "w") as f:
            json.dump(results, f, indent=1)
    return 0


def timed(cmd, env, tries=1):
    """Wall seconds and minor page faults of one whole run (children included).
    `tries` > 1 reruns a failed run (PyTorch 2.15's DDP on Gloo aborts now and
    then as its ranks exit: "terminate called without an active exception")."""
    for attempt in range(tries):
        before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_minflt
        t = time.perf_counter()
        r = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           text=True)
        wall = time.perf_counter() - t
        if r.returncode == 0:
            return wall, resource.getrusage(resource.RUSAGE_CHILDREN).ru_minflt - before
        if attempt + 1 < tries:
            print(f"rerunning after a failure ({r.returncode}): {' '.join(cmd)}", file=sys.stderr)
    sys.exit(f"failed ({r.returncode}): {' '.join(cmd)}\n{r.stderr[-2000:]}")


def unet_step(build, P, shape, iters, env):
    """dtensor-bench-unet-step's JSON line, P ranks under dtensor-run, each
    bound to its own core (as bench/run_suite.py runs it)."""
    cmd = [os.path.join(build, "bin", "dtensor-run"), "-n", str(P), "--bind-cores", "--",
           os.path.join(build, "bin", "dtensor-bench-unet-step"), "--input", shape, "--iters",
           str(iters), "--warmup", "2", "--json"]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"failed ({r.returncode}): {' '.join(cmd)}\n{r.stderr[-2000:]}")
    # dtensor-run prefixes each line with the rank ("[0] {...}").
    line = [line for line in r.stdout.splitlines() if "{" in line][-1]
    return json.loads(line[line.index("{"):])


def overhead_rows(a):
    """The trainer at P = 2 against one rank's shard alone and against two
    shards trained at once with no communication (the floor), interleaved."""
    try:
        import numpy  # noqa: F401  (make_data writes the batch with it)
    except ImportError:
        sys.exit("--overhead writes its batches with numpy: run it under an interpreter that has "
                 "it (Debian's python3-numpy for /usr/bin/python3)")
    lo, hi = (int(v) for v in a.steps.split(","))
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        sys.exit("--overhead needs two cores")
    bin_ = os.path.join(a.build, "bin")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    common = ["--base", "16", "--groups", "4", "--optimizer", "sgd", "--lr", "1e-3",
              "--momentum", "0.9"]

    def trainer(data, steps):
        return [os.path.join(bin_, "dtensor-train-unet"), "--data", data, *common, "--steps",
                str(steps)]

    def wall(cmds):
        """Seconds until every one of `cmds`, started together, has exited."""
        t = time.perf_counter()
        procs = [subprocess.Popen(c, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                  text=True) for c in cmds]
        for c, proc in zip(cmds, procs):
            err = proc.communicate()[1]
            if proc.returncode != 0:
                for other in procs:  # no run left behind on the cores
                    other.kill()
                sys.exit(f"failed ({proc.returncode}): {' '.join(c)}\n{err[-2000:]}")
        return time.perf_counter() - t

    results = {"steps": [lo, hi], "reps": a.reps, "rows": []}
    with tempfile.TemporaryDirectory() as tmp:
        for size in filter(None, a.sizes.split(",")):
            n, c, h, w = (int(v) for v in size.split("x"))
            whole, shard = make_data(tmp, (n, c, h, w)), make_data(tmp, (n, c, h // 2, w))
            stacked = make_data(tmp, (2 * n, c, h // 2, w))  # a rank's half: the shard's shape

            def p2(placements, data=whole):
                return lambda s: [[os.path.join(bin_, "dtensor-run"), "-n", "2", "--bind-cores",
                                   "--", *trainer(data, s), "--placements", placements]]

            runs = {
                "p2": p2("S2"),
                "shard": lambda s: [["taskset", "-c", str(cores[0]), *trainer(shard, s)]],
                "two_shards": lambda s: [["taskset", "-c", str(k), *trainer(shard, s)]
                                         for k in cores[:2]],
            }
            if n % 2 == 0:  # the batch split needs a sample per rank
                runs["p2_batch"] = p2("S0")
            runs["p2_batch_shard_shape"] = p2("S0", stacked)
            times = {k: [] for k in runs}
            for _ in range(a.reps):
                for key, make in runs.items():
                    w_lo, w_hi = wall(make(lo)), wall(make(hi))
                    times[key].append((w_hi - w_lo) / (hi - lo) * 1e3)
            ms = {k: statistics.median(v) for k, v in times.items()}
            row = {"size": size, "p2_ms": ms["p2"], "shard_alone_ms": ms["shard"],
                   "two_shards_at_once_ms": ms["two_shards"],
                   "overhead": ms["p2"] / ms["shard"],
                   "floor": ms["two_shards"] / ms["shard"],
                   "overhead_over_floor": ms["p2"] / ms["two_shards"],
                   "p2_batch_split_ms": ms.get("p2_batch"),
                   "h_split_over_batch_split": ms["p2"] / ms["p2_batch"] if "p2_batch" in ms
                   else None,
                   "p2_batch_split_shard_shape_ms": ms["p2_batch_shard_shape"],
                   "h_split_over_shard_shape_batch_split": ms["p2"] / ms["p2_batch_shard_shape"]}
            add_row(results, row)
    return save(results, a.json)


def sim_link_rows(a):
    """The U-Net step at P = 2 over a simulated link (DTENSOR_SIM_LINK), over
    the real one (loopback), and one rank's shard alone; the runs alternate
    and each keeps its fastest median (the machine may be busy)."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("DTENSOR_SIM_LINK", None)
    env_link = dict(env, DTENSOR_SIM_LINK=a.sim_link)
    results = {"sim_link": a.sim_link, "iters": a.iters, "reps": a.reps, "rows": []}
    for size in a.sizes.split(","):
        n, c, h, w = (int(v) for v in size.split("x"))
        whole, shard = f"{n},{c},{h},{w}", f"{n},{c},{h // 2},{w}"
        best = {}
        for _ in range(a.reps):
            for key, P, shape, e in (("p2_sim", 2, whole, env_link), ("p2", 2, whole, env),
                                     ("shard", 1, shard, env)):
                ms = unet_step(a.build, P, shape, a.iters, e)["step_ms"]
                best[key] = min(best.get(key, ms), ms)
        row = {"size": size, "sim_link": a.sim_link, "p2_sim_link_ms": best["p2_sim"],
               "p2_ms": best["p2"], "shard_alone_ms": best["shard"],
               "overhead_sim_link": best["p2_sim"] / best["shard"],
               "overhead": best["p2"] / best["shard"],
               "link_adds_ms": best["p2_sim"] - best["p2"]}
        add_row(results, row)
    return save(results, a.json)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    p.add_argument("--python", help="an interpreter with PyTorch (not needed with --sim-link)")
    p.add_argument("--sizes", default="2x8x128x128,2x8x256x256,1x16x512x512")
    p.add_argument("--one-rank-size", default="1x8x256x256")
    # PyTorch's start (its import) takes seconds and varies by up to ~0.8 s
    # from run to run on a 2-core VM: over a 40-step difference that alone
    # moved its step by 20 ms (docs/performance.md).
    p.add_argument("--steps", default="5,85", help="the two step counts whose difference is timed")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--json")
    p.add_argument("--sim-link", metavar="SPEC",
                   help="DTENSOR_SIM_LINK for the P = 2 runs: compare them with one rank's shard "
                        "alone instead of with PyTorch")
    p.add_argument("--iters", type=int, default=5, help="timed steps of each --sim-link run")
    p.add_argument("--overhead", action="store_true",
                   help="the trainer at P = 2 against one rank's shard alone and two shards "
                        "trained at once (no PyTorch needed)")
    a = p.parse_args()
    if a.sim_link is not None:
        return sim_link_rows(a)
    if a.overhead:
        return overhead_rows(a)
    if not a.python:
        p.error("--python is required (unless --sim-link)")
    try:
        import numpy  # noqa: F401  (make_data writes the batch with it)
    except ImportError:  # the interpreter with PyTorch may have it: run under that one, once
        if os.environ.get("UNET_VS_TORCH_REEXEC"):
            sys.exit(f"{a.python} has no numpy, which this script and bench/torch_unet_train.py "
                     "need: pip install numpy there")
        os.environ["UNET_VS_TORCH_REEXEC"] = "1"
        os.execv(a.python, [a.python, os.path.abspath(__file__), *sys.argv[1:]])
    lo, hi = (int(v) for v in a.steps.split(","))
    cores = sorted(os.sched_getaffinity(0))
    bin_ = os.path.join(a.build, "bin")
    torch_script = os.path.join(HERE, "torch_unet_train.py")
    env1 = dict(os.environ, OMP_NUM_THREADS="1")
    env2 = dict(os.environ, OMP_NUM_THREADS="2")
    common = ["--base", "16", "--groups", "4"]
    version = subprocess.run([a.python, "-c", "import torch; print(torch.__version__)"],
                             capture_output=True, text=True).stdout.strip()

    def ours(data, steps, ranks):
        prog = [os.path.join(bin_, "dtensor-train-unet"), "--data", data, *common, "--steps",
                str(steps), "--optimizer", "sgd", "--lr", "1e-3", "--momentum", "0.9", "--json"]
        if ranks == 1:
            return ["taskset", "-c", str(cores[0])] + prog
        return [os.path.join(bin_, "dtensor-run"), "-n", str(ranks), "--bind-cores", "--",
                *prog, "--placements", "S2"]

    def theirs(data, steps, threads, extra=()):
        cmd = [a.python, torch_script, "--data", data, *common, "--steps", str(steps),
               "--threads", str(threads), *extra]
        if threads == 1 and not extra:
            cmd = ["taskset", "-c", str(cores[0])] + cmd
        return cmd

    def step_time(make_cmd, env, tries=1):
        """Median over reps of (wall(hi) - wall(lo)) / (hi - lo), and faults per step."""
        times, faults = [], []
        for _ in range(a.reps):
            w_lo, f_lo = timed(make_cmd(lo), env, tries)
            w_hi, f_hi = timed(make_cmd(hi), env, tries)
            times.append((w_hi - w_lo) / (hi - lo))
            faults.append((f_hi - f_lo) / (hi - lo))
        return statistics.median(times) * 1e3, statistics.median(faults)

    results = {"torch": version, "steps": [lo, hi], "reps": a.reps, "rows": []}
    with tempfile.TemporaryDirectory() as tmp:
        shape = tuple(int(v) for v in a.one_rank_size.split("x"))
        data = make_data(tmp, shape)
        # Interleaved: each rep runs ours then theirs at both step counts.
        ms, fl = [], []
        mt = []
        for _ in range(a.reps):
            o = step_time(lambda s: ours(data, s, 1), env1)
            t = step_time(lambda s: theirs(data, s, 1), env1)
            ms.append(o[0])
            fl.append(o[1])
            mt.append(t[0])
        row = {"size": a.one_rank_size, "setup": "1 rank, 1 thread", "dtensor_ms":
               statistics.median(ms), "torch_1proc_ms": statistics.median(mt),
               "dtensor_minor_faults_per_step": statistics.median(fl)}
        add_row(results, row)
        if len(cores) >= 2:
            for size in filter(None, a.sizes.split(",")):  # --sizes "": one rank only
                shape = tuple(int(v) for v in size.split("x"))
                data = make_data(tmp, shape)
                o = step_time(lambda s: ours(data, s, 2), env1)
                nchw = step_time(lambda s: theirs(data, s, 2), env2)
                cl = step_time(lambda s: theirs(data, s, 2, ("--channels-last",)), env2)
                ddp = step_time(lambda s: theirs(data, s, 1, ("--ddp", "2")), env1, tries=3) \
                    if shape[0] % 2 == 0 else (None, None)
                row = {"size": size, "setup": "P=2 bound, 1 thread per rank",
                       "dtensor_ms": o[0], "torch_2threads_nchw_ms": nchw[0],
                       "torch_2threads_channels_last_ms": cl[0], "torch_ddp2_ms": ddp[0]}
                add_row(results, row)
    return save(results, a.json)


if __name__ == "__main__":
    sys.exit(main())
