"""The figures of lesson 4 (docs/lessons/language-model.md), drawn from its measurements.

One colour per model, the course's Okabe-Ito palette: the RNN blue, the LSTM orange, the
transformer vermillion; the count baselines grey, dotted (unigram) and dashed (bigram).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from lessonlib.figures.plots import PALETTE

COLORS = {"rnn": PALETTE["blue"], "lstm": PALETTE["orange"], "gpt": PALETTE["vermillion"],
          "lstm k=4": PALETTE["sky"], "lstm k=16": PALETTE["purple"], "lstm k=64": PALETTE["orange"]}
LABELS = {"rnn": "RNN", "lstm": "LSTM", "gpt": "transformer"}


def _baselines(ax: Axes, baselines: Mapping[str, float], x: float) -> None:
    for (name, bits), style in zip(baselines.items(), (":", "--")):
        ax.axhline(bits, color=PALETTE["grey"], linestyle=style, linewidth=1.2)
        ax.annotate(name, (x, bits), textcoords="offset points", xytext=(-4, 4), ha="right",
                    color=PALETTE["grey"])


def curves(steps: Sequence[int], bits: Mapping[str, Sequence[float]], baselines: Mapping[str, float],
           chars_per_step: int) -> Figure:
    """Validation bits per character against characters read, one line per model."""
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    millions = [s * chars_per_step / 1e6 for s in steps]
    for name, values in bits.items():
        ax.plot(millions, values, color=COLORS[name], linewidth=2, label=LABELS.get(name, name))
    _baselines(ax, baselines, millions[-1])
    ax.set_xlabel("training characters read (millions)")
    ax.set_ylabel("bits per character, held-out play")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(frameon=False, loc="upper right", bbox_to_anchor=(1.0, 0.9))
    return fig


def context(position_bits: Mapping[str, Sequence[float]], baselines: Mapping[str, float],
            labels: Mapping[str, str] | None = None) -> Figure:
    """Loss against the number of characters a model has read in its window, one line per model."""
    labels = {**LABELS, **(labels or {})}
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    for name, values in position_bits.items():
        seen = range(1, len(values) + 1)
        ax.plot(seen, values, color=COLORS[name], linewidth=2, label=labels.get(name, name))
    _baselines(ax, baselines, len(next(iter(position_bits.values()))))
    ax.set_xscale("log", base=2)
    ax.set_xlabel("characters read so far in the window (log scale)")
    ax.set_ylabel("bits for the next character")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(frameon=False, loc="upper right", bbox_to_anchor=(1.0, 0.85))
    return fig


def temperatures(chars: Sequence[str], probs: Mapping[float, Sequence[float]]) -> Figure:
    """The next character's probabilities at each temperature, the most likely characters only."""
    fig, ax = plt.subplots(figsize=(6.4, 3.2))
    width = 0.8 / len(probs)
    shades = (PALETTE["sky"], PALETTE["blue"], PALETTE["purple"], PALETTE["vermillion"])
    for i, ((t, p), color) in enumerate(zip(probs.items(), shades)):
        ax.bar([j + width * (i - (len(probs) - 1) / 2) for j in range(len(chars))], p, width=width,
               color=color, label=f"temperature {t:g}")
    ax.set_xticks(range(len(chars)), [repr(c)[1:-1] if c.strip() else repr(c) for c in chars])
    ax.set_xlabel("next character")
    ax.set_ylabel("probability")
    ax.legend(frameon=False)
    return fig


def generation_cost(flops: Mapping[str, Sequence[int]], styles: Mapping[str, tuple[str, str]]) -> Figure:
    """Flops to write each new character against the characters written so far."""
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    for name, values in flops.items():
        color, line = styles[name]
        ax.plot(range(1, len(values) + 1), [v / 1e6 for v in values], color=color, linestyle=line,
                linewidth=2, label=name)
    ax.set_xlabel("characters in the text so far")
    ax.set_ylabel("million flops for the next character")
    ax.set_ylim(bottom=0)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(frameon=False)
    return fig
