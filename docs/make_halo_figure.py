#!/usr/bin/env python3
"""Draws docs/halo.png: the halo plan of one sharded dim (docs/design.md §5).

The plan is recomputed here from the formulas in docs/halo.md, independently of
the C++ code, for L=14 input positions over P=3 ranks, kernel 4, stride 2,
dilation 1, padding (2, 1). Run: python3 docs/make_halo_figure.py
(needs python3-matplotlib; a developer tool, not a test dependency).
"""
import math
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.patches import FancyArrowPatch, Rectangle

L, P, K, S, D, PL, PR = 14, 3, 4, 2, 1, 2, 1
E = D * (K - 1) + 1
O = (L + PL + PR - E) // S + 1


def chunk(n, p, r):
    c = -(-n // p)
    return min(r * c, n), min((r + 1) * c, n)


COLORS = ["#4C72B0", "#DD8452", "#55A868"]
fig, ax = plt.subplots(figsize=(11, 4.8))
ax.set_xlim(-PL - 1.5, L + PR + 1.5)
ax.set_ylim(-1.2, 2 + 1.6 * P)
ax.axis("off")

# The global input row, coloured by owner, with padding cells hatched.
y0 = 1.6 * P + 0.4
for i in range(-PL, L + PR):
    if 0 <= i < L:
        owner = next(r for r in range(P) if chunk(L, P, r)[0] <= i < chunk(L, P, r)[1])
        ax.add_patch(Rectangle((i, y0), 1, 0.8, facecolor=COLORS[owner], edgecolor="white"))
        ax.text(i + 0.5, y0 + 0.4, str(i), ha="center", va="center", color="white", fontsize=8)
    else:
        ax.add_patch(Rectangle((i, y0), 1, 0.8, facecolor="none", edgecolor="grey", hatch="//"))
ax.text(-PL - 1.4, y0 + 0.4, "input", va="center", fontsize=9)

for r in range(P):
    i0, i1 = chunk(L, P, r)
    o0, o1 = chunk(O, P, r)
    yr = 1.6 * (P - 1 - r) + 0.2
    if o1 <= o0:
        ax.text(-PL - 1.4, yr + 0.4, f"rank {r}: no output", va="center", fontsize=9)
        continue
    a, b = o0 * S - PL, (o1 - 1) * S - PL + E - 1
    a2, b2 = max(a, 0), min(b, L - 1)
    lp, rp = a2 - a, b - b2
    ax.text(-PL - 1.4, yr + 0.4, f"rank {r}", va="center", fontsize=9)
    for i in range(a, b + 1):
        if a2 <= i <= b2:
            owner = next(q for q in range(P) if chunk(L, P, q)[0] <= i < chunk(L, P, q)[1])
            face = COLORS[owner]
            ax.add_patch(Rectangle((i, yr), 1, 0.8, facecolor=face, edgecolor="white",
                                   alpha=1.0 if owner == r else 0.55))
        else:
            ax.add_patch(Rectangle((i, yr), 1, 0.8, facecolor="none", edgecolor="grey", hatch="//"))
    ax.text(b + 1.3, yr + 0.4,
            f"window [{a2}, {b2}], lp={lp}, rp={rp} -> outputs [{o0}, {o1})", va="center",
            fontsize=8)
    # Arrows from the owners of the halo parts.
    for q in range(P):
        if q == r:
            continue
        q0, q1 = chunk(L, P, q)
        lo, hi = max(a2, q0), min(b2, q1 - 1)
        if lo > hi:
            continue
        ax.add_patch(FancyArrowPatch(((lo + hi + 1) / 2, y0), ((lo + hi + 1) / 2, yr + 0.85),
                                     arrowstyle="->", mutation_scale=12, color=COLORS[q],
                                     linewidth=1.4))

ax.set_title(f"Halo plan: L={L}, P={P}, kernel {K}, stride {S}, dilation {D}, padding ({PL}, {PR}); "
             f"output length {O}\nfaded cells arrive from their owner (arrows); hatched cells are "
             "zero padding (local lp/rp)", fontsize=9)
out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "halo.png")
fig.savefig(out, dpi=110, bbox_inches="tight")
print("wrote", out)
