#!/usr/bin/env python3
"""The U-Net step's time at P ranks on a 1-D mesh (H sharded, a fixed tile
per rank), from the message counts dtensor-bench-unet-step reports and an
alpha-beta view of the link (docs/performance.md, "Messages per step, and
what they mean at 8-1024 ranks"):

    T(P) = T_tile + local * min(P - 1, 2) + exposed * alpha + rounds(P) * alpha
           + (agreement + direct) * (P - 1) * o

where `local` is what a rank spends beyond its tile per neighbour whatever
the link (the halo rows recomputed, the strips copied, the messages' CPU
and the event loop's: the P = 2 step over loopback minus the tile alone; an
interior rank of a 1-D mesh has two neighbours), `exposed` counts the rounds of the halo exchanges, the small
collectives and the agreement checks that are not hidden behind compute
(fitted at P = 2 against the simulated link: the chain's batch pieces and
its interior-first convolution hide most of them while alpha stays below a
piece's compute), `direct` the small exchanges that send to every peer at
any P (the chain's norm statistics and backward sums, posted behind compute
to every peer of the group; the loss, whose agreement check rides along,
while it runs direct), and rounds(P) the collectives past that size: the gradients' all-reduce, one round while
(P - 1) x its bytes stay within 256 KiB, beyond that recursive halving and
doubling (2 log2 P rounds at a power of two, two more otherwise) or a ring
of 2 (P - 1) rounds, whichever the group's rule prices lower, and the
barriers, ceil(log2 P) rounds each (backends.md, "How the Gloo group runs
collectives").

Prints the table and writes the plot as SVG (no plotting library needed):

    python3 bench/unet_scaling_model.py --svg docs/unet_scaling_model.svg
"""
import argparse
import math


# The CPU group's choice of allreduce, as core/detail/direct_collectives.h makes it.
DIRECT_LIMIT_BYTES = 256 * 1024
MESSAGE_COST_IN_LATENCIES = 0.02
BYTES_PER_LATENCY = 64 * 1024


def halving_doubling(P):
    """Rounds and bytes (a multiple of the buffer's) of halving and doubling."""
    p = 2 ** int(math.floor(math.log2(P)))
    folded = 0 if p == P else 2
    return 2 * int(math.log2(p)) + folded, 2 * (p - 1) / p + folded


def allreduce_rounds(P, nbytes):
    """Dependent message rounds of an allreduce of `nbytes` per rank at P ranks."""
    b, m = nbytes / BYTES_PER_LATENCY, MESSAGE_COST_IN_LATENCIES
    hd_rounds, hd_share = halving_doubling(P)
    ring = 2 * (P - 1) * (1 + m) + 2 * (P - 1) / P * b
    hd = hd_rounds * (1 + m) + hd_share * b
    direct = 1 + (P - 1) * m + (P - 1) * b
    if (P - 1) * nbytes <= DIRECT_LIMIT_BYTES and direct <= ring and direct <= hd:
        return 1
    return hd_rounds if hd < ring else 2 * (P - 1)


def rounds(P, a):
    """Dependent message rounds of the collectives that are not direct at P."""
    return allreduce_rounds(P, a.grad_kb * 1024) + a.barriers * math.ceil(math.log2(P))


def step_ms(P, a):
    """Step time in ms at P ranks for alpha a.alpha_us (one latency)."""
    alpha, o = a.alpha_us / 1e3, a.o_us / 1e3
    return (a.tile_ms + a.local_ms * min(P - 1, 2) + a.exposed * alpha + rounds(P, a) * alpha
            + (a.agreement + a.direct) * (P - 1) * o)


def svg(a, alphas, ranks):
    w, h, left, right, top, bottom = 640, 400, 70, 150, 30, 50
    lo = math.log10(a.tile_ms * 0.8)
    hi = math.log10(max(step_ms(ranks[-1], a_) for a_ in alphas) * 1.3)
    x = lambda P: left + (math.log2(P) - 1) / (math.log2(ranks[-1]) - 1) * (w - left - right)
    y = lambda ms: top + (hi - math.log10(ms)) / (hi - lo) * (h - top - bottom)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
           'font-family="sans-serif" font-size="12">',
           f'<rect width="{w}" height="{h}" fill="white"/>',
           f'<text x="{left}" y="18">U-Net step at P ranks (model; tile {a.tile_ms:g} ms alone)</text>']
    for P in ranks:
        out.append(f'<line x1="{x(P):.1f}" y1="{top}" x2="{x(P):.1f}" y2="{h - bottom}" '
                   'stroke="#ddd"/>')
        out.append(f'<text x="{x(P):.1f}" y="{h - bottom + 16}" text-anchor="middle">{P}</text>')
    for e in range(math.floor(lo), math.ceil(hi) + 1):
        for m in (1, 2, 5):
            ms = m * 10 ** e
            if lo <= math.log10(ms) <= hi:
                out.append(f'<line x1="{left}" y1="{y(ms):.1f}" x2="{w - right}" y2="{y(ms):.1f}" '
                           'stroke="#eee"/>')
                out.append(f'<text x="{left - 6}" y="{y(ms) + 4:.1f}" text-anchor="end">'
                           f'{ms:g}</text>')
    out.append(f'<text x="{(left + w - right) / 2}" y="{h - 12}" text-anchor="middle">ranks P</text>')
    out.append(f'<text x="16" y="{(top + h - bottom) / 2}" '
               f'transform="rotate(-90 16 {(top + h - bottom) / 2})" text-anchor="middle">'
               'step, ms (log)</text>')
    colours = ["#1f77b4", "#d62728", "#2ca02c"]
    series = [(f"alpha {a_.alpha_us:g} us", [step_ms(P, a_) for P in ranks]) for a_ in alphas]
    series.append(("tile alone", [a.tile_ms] * len(ranks)))
    for i, (name, ms) in enumerate(series):
        pts = " ".join(f"{x(P):.1f},{y(v):.1f}" for P, v in zip(ranks, ms))
        dash = ' stroke-dasharray="5,4"' if name == "tile alone" else ""
        out.append(f'<polyline points="{pts}" fill="none" stroke="{colours[i % 3]}" '
                   f'stroke-width="2"{dash}/>')
        out.append(f'<text x="{w - right + 8}" y="{y(ms[-1]) + 4:.1f}" fill="{colours[i % 3]}">'
                   f'{name}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tile-ms", type=float, default=72.0, help="one rank's tile alone")
    p.add_argument("--local-ms", type=float, default=9.0,
                   help="a rank's own cost per neighbour beyond its tile (P = 2 over loopback "
                        "minus the tile alone)")
    p.add_argument("--alphas-us", default="50,500", help="latencies of one message round")
    p.add_argument("--o-us", type=float, default=5.0, help="the sender's cost of one message")
    p.add_argument("--exposed", type=float, default=5.5,
                   help="rounds of halo exchanges, small collectives and agreement checks "
                        "not hidden behind compute (5.5 fitted for alpha up to 1 ms, 13 from "
                        "1 to 3 ms)")
    p.add_argument("--direct", type=float, default=13,
                   help="small collectives per step (their messages)")
    p.add_argument("--grad-kb", type=float, default=104,
                   help="the gradients' all-reduce, KiB per rank")
    p.add_argument("--barriers", type=float, default=2, help="barriers per step")
    p.add_argument("--agreement", type=float, default=25,
                   help="agreement messages per step per peer")
    p.add_argument("--svg", help="write the plot here")
    a = p.parse_args()
    ranks = [2 ** k for k in range(1, 11)]
    alphas = []
    for v in a.alphas_us.split(","):
        b = argparse.Namespace(**vars(a))
        b.alpha_us = float(v)
        alphas.append(b)
    print("P     " + "  ".join(f"alpha {b.alpha_us:g} us".rjust(22) for b in alphas))
    for P in ranks:
        cells = [f"{step_ms(P, b):9.1f} ms ({step_ms(P, b) / a.tile_ms:5.2f}x)" for b in alphas]
        print(f"{P:<5} " + "  ".join(c.rjust(22) for c in cells))
    if a.svg:
        with open(a.svg, "w") as f:
            f.write(svg(a, alphas, ranks))


if __name__ == "__main__":
    main()
