"""Shared styling for the measured plots of the recurrent-networks and gates-and-attention lessons.

One colour per model (Okabe-Ito, readable with every common colour-vision deficiency) and the
plots the lesson draws from measurements: gradient size against distance on a log scale (per
model, or per spectral radius of the RNN's recurrent weight), tanh with its slope, accuracy
against sequence length (mean line, faint per-seed dots), and a training run with and without
gradient clipping (gradient norm and loss per step).
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure

# Okabe & Ito (2008), "Color Universal Design".
PALETTE = {
    "blue": "#0072B2",
    "orange": "#E69F00",
    "green": "#009E73",
    "vermillion": "#D55E00",
    "sky": "#56B4E9",
    "purple": "#CC79A7",
    "yellow": "#F0E442",
    "grey": "#6E6E6E",
}
MODEL_COLORS = {
    "rnn": PALETTE["blue"],
    "lstm": PALETTE["orange"],
    "lstm_open": PALETTE["green"],
    "attention": PALETTE["vermillion"],
}
MODEL_LABELS = {
    "rnn": "RNN",
    "lstm": "LSTM, default start",
    "lstm_open": "LSTM, forget gate open",
    "attention": "one attention step",
}
MODEL_MARKERS = {"rnn": "o", "lstm": "s", "lstm_open": "^", "attention": "D"}


def _axes(ax: Axes | None, figsize: tuple[float, float]) -> tuple[Figure, Axes]:
    if ax is None:
        fig, ax = plt.subplots(figsize=figsize)
        return fig, ax
    return ax.figure, ax


def _reach_curve(ax: Axes, reach: torch.Tensor, color: str, label: str, marker: str) -> None:
    ax.semilogy(range(len(reach)), reach.tolist(), color=color, label=label, marker=marker, markevery=10,
                linewidth=2)


def _reach_axes(ax: Axes) -> None:
    ax.set_xlabel("distance from the end (steps back)")
    ax.set_ylabel("gradient size (log scale)")
    ax.grid(True, which="major", axis="y", alpha=0.3)
    ax.legend(frameon=False, loc="best")


def gradient_plot(reaches: Mapping[str, torch.Tensor], ax: Axes | None = None) -> Figure:
    """reaches {model: (L,) gradient size indexed by distance from the end} on a log y-axis."""
    fig, ax = _axes(ax, (6.8, 3.8))
    for name, reach in reaches.items():
        _reach_curve(ax, reach, MODEL_COLORS[name], MODEL_LABELS[name], MODEL_MARKERS[name])
    _reach_axes(ax)
    return fig


RADIUS_STYLES = ((PALETTE["blue"], "o"), (PALETTE["green"], "s"), (PALETTE["vermillion"], "^"))


def radius_plot(reaches: Mapping[float, torch.Tensor], ax: Axes | None = None) -> Figure:
    """reaches {spectral radius of the RNN's W_hh: (L,) gradient size by distance}, smallest
    radius first, on a log y-axis: one curve per radius (at most len(RADIUS_STYLES))."""
    if len(reaches) > len(RADIUS_STYLES):
        raise ValueError(f"at most {len(RADIUS_STYLES)} radii, got {len(reaches)}")
    fig, ax = _axes(ax, (6.8, 3.8))
    for (radius, reach), (color, marker) in zip(sorted(reaches.items()), RADIUS_STYLES):
        _reach_curve(ax, reach, color, f"RNN, spectral radius of $W_h$ {radius:.2f}", marker)
    _reach_axes(ax)
    return fig


def tanh_plot(marks: Sequence[float] = (0, 1, 2, 3)) -> Figure:
    """tanh and its slope 1 - tanh^2 side by side, with the slope marked at +-marks."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(8, 3.2))
    x = torch.linspace(-4, 4, 401)
    left.plot(x, torch.tanh(x), color=PALETTE["blue"], linewidth=2)
    left.axhline(1, color=PALETTE["grey"], linestyle=":", linewidth=1)
    left.axhline(-1, color=PALETTE["grey"], linestyle=":", linewidth=1)
    left.set_title("tanh(x): squashed into (-1, 1)")
    left.set_xlabel("x")
    slope = 1 - torch.tanh(x) ** 2
    right.plot(x, slope, color=PALETTE["vermillion"], linewidth=2)
    for m in marks:
        s = 1 - torch.tanh(torch.tensor(float(m))) ** 2
        right.plot([m, -m], [s, s], "o", color=PALETTE["vermillion"])
        right.annotate(f"{s:.2g}", (m, s.item()), textcoords="offset points", xytext=(6, 6))
    right.set_title("its slope 1 - tanh(x)²: small away from 0")
    right.set_xlabel("x")
    right.set_ylim(0, 1.15)
    fig.tight_layout()
    return fig


def accuracy_plot(
    accuracy: Mapping[tuple[str, int, int], float],
    models: Sequence[str],
    lengths: Sequence[int],
    seeds: Sequence[int],
    ax: Axes | None = None,
) -> Figure:
    """accuracy {(model, length, seed): acc}: a line through the mean over seeds, a faint dot per seed."""
    fig, ax = _axes(ax, (6.8, 3.8))
    spread = 0.012 * (max(lengths) - min(lengths))  # nudge the models apart so the dots stay visible
    for k, name in enumerate(models):
        shift = (k - (len(models) - 1) / 2) * spread
        mean = [sum(accuracy[(name, n, s)] for s in seeds) / len(seeds) for n in lengths]
        ax.plot([n + shift for n in lengths], mean, color=MODEL_COLORS[name], marker=MODEL_MARKERS[name],
                linewidth=2, label=MODEL_LABELS[name])
        for n in lengths:
            ax.scatter([n + shift] * len(seeds), [accuracy[(name, n, s)] for s in seeds],
                       color=MODEL_COLORS[name], alpha=0.4, s=30, linewidths=0)
    ax.axhline(0.5, color=PALETTE["grey"], linestyle=":", linewidth=1)
    ax.annotate("guessing", ((lengths[0] + lengths[1]) / 2 if len(lengths) > 1 else lengths[0], 0.5),
                textcoords="offset points", xytext=(0, -12), ha="center", color=PALETTE["grey"])
    ax.set_xticks(list(lengths))
    ax.set_xlabel("sequence length (steps the first token must be remembered)")
    ax.set_ylabel("validation accuracy")
    ax.set_ylim(0.35, 1.05)
    ax.legend(frameon=False, loc="center right")
    return fig


CLIP_COLORS = (PALETTE["vermillion"], PALETTE["blue"])


def clipping_plot(traces: Mapping[str, tuple[torch.Tensor, torch.Tensor]], clip: float) -> Figure:
    """traces {label: (loss (steps, M), gradient norm (steps, M))}, at most two runs of M seeds each.

    Left: the gradient norm before clipping at every step, log scale, with the clipping threshold
    dotted. Right: the training loss, log scale, with the loss of guessing (ln 2) dotted. One thin
    line per seed and a thick line through the median over seeds.
    """
    if len(traces) > len(CLIP_COLORS):
        raise ValueError(f"at most {len(CLIP_COLORS)} runs, got {len(traces)}")
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.6))
    for (label, (loss, norm)), color in zip(traces.items(), CLIP_COLORS):
        for ax, values in ((left, norm), (right, loss)):
            steps = range(1, len(values) + 1)
            ax.plot(steps, values, color=color, linewidth=0.6, alpha=0.35)
            ax.plot(steps, values.median(1).values, color=color, linewidth=2, label=label)
    left.axhline(clip, color=PALETTE["grey"], linestyle=":", linewidth=1.5, label="clipping threshold")
    right.axhline(math.log(2), color=PALETTE["grey"], linestyle=":", linewidth=1.5, label="loss of guessing")
    for ax, title in ((left, "gradient norm before clipping"), (right, "training loss")):
        ax.set_yscale("log")
        ax.set_xlabel("training step")
        ax.set_title(title)
        ax.legend(frameon=False, loc="center right")
    fig.tight_layout()
    return fig
