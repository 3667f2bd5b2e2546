"""Figures of the recurrence lesson, in the house style of lessonlib.figures.plots.

hillis_steele draws the rounds of lessonlib.models.scan.scan_parallel from hillis_steele_rounds
itself, so the picture is the schedule the code runs: one row per round, one column per step,
an arrow from each position to the one it combines with, and under each position the steps its
pair covers after that round.
"""
from __future__ import annotations

import matplotlib.pyplot as plt
import torch
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch
from torch import Tensor

from lessonlib.figures.diagrams import LIGHT, TEXT
from lessonlib.figures.plots import PALETTE
from lessonlib.models.scan import hillis_steele_rounds


def covered(T: int) -> list[list[tuple[int, int]]]:
    """For the input row and after each round, the steps (first, last), 1-based, that position t's
    pair covers: T positions per row, 1 + ceil(log2 T) rows."""
    rows = [[(t + 1, t + 1) for t in range(T)]]
    for pairs in hillis_steele_rounds(T):
        prev = rows[-1]
        row = list(prev)
        for t, s in pairs:  # t combines with s = t - d: it now covers s's first step to its own last
            row[t] = (prev[s][0], prev[t][1])
        rows.append(row)
    return rows


def by_schedule(a: Tensor, b: Tensor) -> Tensor:
    """a, b (B, T, D) -> h (B, T, D) from h_0 = 0, computed by combining, round by round, exactly the
    pairs (t, t - d) that hillis_steele_rounds lists (the schedule hillis_steele draws), so that a
    lesson can check that scan_parallel gives the same numbers."""
    for pairs in hillis_steele_rounds(a.shape[1]):
        t, s = torch.tensor(pairs).T  # position t combines with s = t - d: first s's pair, then its own
        a, b = a.index_copy(1, t, a[:, t] * a[:, s]), b.index_copy(1, t, a[:, t] * b[:, s] + b[:, t])
    return b


def hillis_steele(T: int = 8) -> Figure:
    """The scan on T steps: row 0 holds the pairs (a_t, b_t); in round r each position t >= d = 2^(r-1)
    combines with position t - d (arrows); a box reads 'i..j' when its pair stands for steps i to j,
    green once it covers 1..t (so that its b is h_t)."""
    rounds = hillis_steele_rounds(T)
    rows = covered(T)
    fig, ax = plt.subplots(figsize=(1.0 * T + 1.6, 1.1 * len(rows) + 0.6))
    ax.set_xlim(-1.6, T - 0.4)
    ax.set_ylim(-len(rows) + 0.4, 0.8)
    ax.axis("off")
    w, h = 0.78, 0.5
    for r, row in enumerate(rows):
        y = -r
        label = "inputs" if r == 0 else f"round {r}\n(d = {2 ** (r - 1)})"
        ax.text(-1.5, y, label, ha="left", va="center", fontsize=9, color=TEXT)
        for t, (first, last) in enumerate(row):
            done = first == 1
            fill, edge = (LIGHT["green"], PALETTE["green"]) if done else (LIGHT["grey"], PALETTE["grey"])
            ax.add_patch(FancyBboxPatch((t - w / 2, y - h / 2), w, h, boxstyle="round,pad=0.02,rounding_size=0.08",
                                        facecolor=fill, edgecolor=edge, linewidth=1.2))
            text = f"{first}" if first == last else f"{first}..{last}"
            ax.text(t, y, text, ha="center", va="center", fontsize=9, color=TEXT)
        if r > 0:
            for t, s in rounds[r - 1]:
                ax.add_patch(FancyArrowPatch((s, y + 1 - h / 2), (t, y + h / 2), arrowstyle="-|>",
                                             mutation_scale=8, color=PALETTE["blue"], linewidth=0.9,
                                             shrinkA=1, shrinkB=1))
            combining = {t for t, _ in rounds[r - 1]}
            for t in range(T):  # every position also reads its own pair; those that do not combine keep it
                ax.add_patch(FancyArrowPatch((t, y + 1 - h / 2), (t, y + h / 2), arrowstyle="-",
                                             color=PALETTE["blue"] if t in combining else PALETTE["grey"],
                                             linewidth=0.9, linestyle="-" if t in combining else ":"))
    for t in range(T):
        ax.text(t, 0.62, f"t = {t + 1}", ha="center", va="center", fontsize=8, color=PALETTE["grey"])
    fig.tight_layout()
    return fig
