"""Shared styling for the measured plots of the sequences-to-attention lesson.

One colour per model (Okabe-Ito, readable with every common colour-vision deficiency) and the
three plots the lesson draws from measurements: gradient size against distance on a log scale,
tanh with its slope, and accuracy against sequence length (mean line, faint per-seed dots).
"""
from __future__ import annotations

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


def gradient_plot(reaches: Mapping[str, torch.Tensor], ax: Axes | None = None) -> Figure:
    """reaches {model: (L,) gradient size indexed by distance from the end} on a log y-axis."""
    fig, ax = _axes(ax, (6.8, 3.8))
    for name, reach in reaches.items():
        distance = range(len(reach))
        ax.semilogy(distance, reach.tolist(), color=MODEL_COLORS[name], label=MODEL_LABELS[name],
                    marker=MODEL_MARKERS[name], markevery=10, linewidth=2)
    ax.set_xlabel("distance from the end (steps back)")
    ax.set_ylabel("gradient size (log scale)")
    ax.grid(True, which="major", axis="y", alpha=0.3)
    ax.legend(frameon=False, loc="best")
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
