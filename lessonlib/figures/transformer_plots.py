"""Figures of the transformer lesson, in the house style of lessonlib.figures.plots.

- encodings: the sinusoidal position encodings as an image, and the similarity of two
  positions' encodings against their distance;
- head_maps: the attention weights of several heads side by side, one sequence;
- memory_plot: the memory task's accuracy and steps to solve against length (log scale), a line
  through the seeds' mean and a faint dot per seed;
- cost_plot: counted quantities against length, log-log, a line per series.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.figure import Figure

from lessonlib.figures.plots import MODEL_COLORS, MODEL_LABELS, MODEL_MARKERS, PALETTE

COLORS = {**MODEL_COLORS, "transformer": PALETTE["purple"]}
LABELS = {**MODEL_LABELS, "transformer": "transformer"}
MARKERS = {**MODEL_MARKERS, "transformer": "D"}


def encodings(pe: torch.Tensor) -> Figure:
    """pe (L, d): left, the encodings as an image (position x feature); right, the dot product of
    each position's encoding with that of position 0, against the distance."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.6), gridspec_kw={"width_ratios": [1.2, 1]})
    image = left.imshow(pe.T.numpy(), aspect="auto", cmap="RdBu_r", vmin=-1, vmax=1, origin="lower",
                        interpolation="nearest")
    left.set_xlabel("position")
    left.set_ylabel("feature (pairs sin, cos)")
    left.set_title("sinusoidal encodings")
    fig.colorbar(image, ax=left, fraction=0.046, pad=0.04)
    similarity = (pe @ pe[0]).numpy()
    right.plot(range(len(pe)), similarity, color=PALETTE["blue"], linewidth=2)
    right.set_xlabel("distance between two positions")
    right.set_ylabel("dot product of their encodings")
    right.set_title("dot product against distance")
    right.grid(True, alpha=0.3)
    fig.tight_layout()
    return fig


def head_maps(weights: torch.Tensor, labels: Sequence[str], rows: slice = slice(None)) -> Figure:
    """weights (heads, L, L) of one sequence, labels the L input tokens: one heatmap per head,
    queries (rows, optionally a slice of them) against keys."""
    heads = weights.shape[0]
    row_ids = range(weights.shape[1])[rows]
    fig, axes = plt.subplots(1, heads, figsize=(4.2 * heads, 3.8), sharey=True)
    for h, ax in enumerate(np.atleast_1d(axes)):
        image = ax.imshow(weights[h, rows].numpy(), cmap="Blues", vmin=0, vmax=1, aspect="auto",
                          interpolation="nearest")
        ax.set_xticks(range(len(labels)), labels)
        ax.set_yticks(range(len(row_ids)), [f"{labels[i]} ({i})" for i in row_ids])
        ax.set_xlabel("key: token it may read")
        ax.set_title(f"head {h}")
        ax.spines[:].set_visible(True)
    np.atleast_1d(axes)[0].set_ylabel("query: token (position)")
    fig.colorbar(image, ax=axes, label="attention weight", fraction=0.03, pad=0.02)
    return fig


def memory_plot(accuracy: Mapping[tuple[str, int, int], float], steps: Mapping[tuple[str, int, int], int],
                models: Sequence[str], seeds: Sequence[int], budget: int) -> Figure:
    """Left: validation accuracy against length; right: steps each seed trained (budget = not solved).
    Each model is drawn at the lengths it was run at (the keys (model, length, seed) of accuracy)."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.9))
    all_lengths = sorted({n for _, n, _ in accuracy})
    for k, name in enumerate(models):
        lengths = sorted({n for m, n, _ in accuracy if m == name})
        nudge = 1 + 0.04 * (k - (len(models) - 1) / 2)  # on a log axis, a factor keeps dots apart
        xs = [n * nudge for n in lengths]
        for ax, data in ((left, accuracy), (right, steps)):
            mean = [np.mean([data[name, n, s] for s in seeds]) for n in lengths]
            ax.plot(xs, mean, color=COLORS[name], marker=MARKERS[name], linewidth=2, label=LABELS[name])
            for x, n in zip(xs, lengths):
                ax.scatter([x] * len(seeds), [data[name, n, s] for s in seeds], color=COLORS[name],
                           alpha=0.4, s=30, linewidths=0)
    left.axhline(0.5, color=PALETTE["grey"], linestyle=":", linewidth=1)
    left.set_ylabel("validation accuracy")
    left.set_ylim(0.35, 1.05)
    right.axhline(budget, color=PALETTE["grey"], linestyle=":", linewidth=1)
    right.annotate("budget: not solved", (all_lengths[0], budget), textcoords="offset points", xytext=(0, -14),
                   color=PALETTE["grey"])
    right.set_yscale("log")
    ticks = [t for t in (10, 20, 50, 100, 200, 500) if t < budget / 1.5] + [budget]  # no two labels overlap
    right.set_yticks(ticks, [str(t) for t in ticks])
    right.set_ylabel("training steps (mean line, dot per seed)")
    for ax in (left, right):
        ax.set_xscale("log")
        ax.set_xticks(all_lengths, [str(n) for n in all_lengths])
        ax.minorticks_off()
        ax.set_xlabel("sequence length")
        ax.grid(True, axis="y", alpha=0.3)
    handles, labels = left.get_legend_handles_labels()
    fig.legend(handles, labels, frameon=False, loc="lower center", ncol=len(models))
    fig.tight_layout(rect=(0, 0.08, 1, 1))  # room for the legend under both panels
    return fig


Series = tuple[str, str, Sequence[float], bool]  # label, model (its colour and marker), values, dashed


def cost_plot(xs: Sequence[int], panels: Sequence[tuple[str, Sequence[Series]]],
              xlabel: str = "sequence length") -> Figure:
    """One log-log panel per (y label, series), all against the same xs."""
    fig, axes = plt.subplots(1, len(panels), figsize=(4.4 * len(panels), 3.6), squeeze=False)
    for ax, (ylabel, series) in zip(axes[0], panels):
        for label, model, values, dashed in series:
            ax.loglog(xs, values, "--" if dashed else "-", color=COLORS[model], marker=MARKERS[model],
                      linewidth=2, label=label)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(frameon=False, loc="upper left", fontsize="small")
    fig.tight_layout()
    return fig
