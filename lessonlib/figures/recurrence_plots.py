"""Figures of the recurrence lesson (docs/lessons/recurrence-returns.md) drawn from its measurements,
in the house style of lessonlib.figures.plots. The scan's rounds are drawn by
lessonlib.figures.scan_plots.

One colour per kind of layer on the whole page (Okabe-Ito): softmax attention vermillion, as the
transformer in the language-model lesson, plain linear attention sky blue, normalised linear
attention purple, minGRU green, the RNN blue and the LSTM orange. COLORS is keyed by the names
lessonlib.experiments.language_model gives the models.

- state_plot: the numbers a layer keeps while writing text, against the tokens read, log-log, a
  line per layer (a fixed state is flat, a KV cache rises);
- recall_plot: associative recall against the number of stored pairs, a line per layer, with
  chance and the key size marked;
- bits_plot: bits per character of each model, one dot per model, with a shaded span (the models
  compared against) and dashed reference lines (count baselines).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from lessonlib.figures.plots import PALETTE

COLORS = {"rnn": "blue", "lstm": "orange", "gpt": "vermillion", "softmax_attention": "vermillion",
          "min_gru": "green", "linear_attention": "sky", "normalised_linear_attention": "purple"}
MARKERS = {"softmax_attention": "s", "linear_attention": "o"}


def state_plot(tokens: Sequence[int], kept: Mapping[str, tuple[str, Sequence[int]]]) -> Figure:
    """Numbers kept after reading each count of tokens, log-log: kept maps a label to (model, numbers),
    the model naming its colour; the first line solid, the next dashed."""
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    for (label, (model, values)), line in zip(kept.items(), ("-", "--", "-.", ":")):
        ax.loglog(tokens, values, line, color=PALETTE[COLORS[model]], linewidth=2, label=label)
    for axis in (ax.xaxis, ax.yaxis):  # 1,000, not 10^3
        axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:,.0f}"))
    ax.set_xlabel("tokens read (log scale)")
    ax.set_ylabel("numbers kept (log scale)")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(frameon=False, loc="upper left")
    fig.tight_layout()
    return fig


def recall_plot(ns: Sequence[int], recall: Mapping[str, tuple[str, Sequence[float]]], key_size: int) -> Figure:
    """Recall (the share of keys answered with their own value) against the number of pairs n, log2
    axis: recall maps a label to (model, values); a dotted line at n = key_size, a dashed one at
    chance, 1 / n."""
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    for label, (model, values) in recall.items():
        ax.plot(ns, values, color=PALETTE[COLORS[model]], marker=MARKERS.get(model, "^"), linewidth=2, label=label)
    ax.plot(ns, [1 / n for n in ns], color=PALETTE["grey"], linestyle="--", linewidth=1, label="chance, 1 / n")
    ax.axvline(key_size, color=PALETTE["grey"], linestyle=":", linewidth=1)
    ax.annotate(f"n = key size ({key_size})", (key_size, 0.12), textcoords="offset points", xytext=(4, 0),
                color=PALETTE["grey"])
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(ns), [str(n) for n in ns])
    ax.minorticks_off()
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("pairs stored, n (log scale)")
    ax.set_ylabel("recall")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(frameon=False, loc="center left")
    fig.tight_layout()
    return fig


def bits_plot(bits: Mapping[str, tuple[str, float]], span: tuple[float, float], span_label: str,
              baselines: Mapping[str, float]) -> Figure:
    """One dot per model at its bits per character, labelled with its value, the first model on top:
    bits maps a label to (model, bits); the interval `span` shaded grey and labelled `span_label`,
    each baseline a dashed vertical line."""
    fig, ax = plt.subplots(figsize=(6.4, 0.45 * len(bits) + 1.2))
    top = len(bits) - 0.3  # the labels' row, above the first model's
    ax.axvspan(*span, color=PALETTE["grey"], alpha=0.15, linewidth=0)
    ax.annotate(span_label, (span[0], top), textcoords="offset points", xytext=(4, 0), va="center",
                color=PALETTE["grey"])
    rows = range(len(bits))[::-1]
    for y, (model, value) in zip(rows, bits.values()):
        ax.plot([value], [y], "o", color=PALETTE[COLORS[model]], markersize=8)
        ax.annotate(f"{value:.2f}", (value, y), textcoords="offset points", xytext=(8, 0), va="center")
    for name, value in baselines.items():
        ax.axvline(value, color=PALETTE["grey"], linestyle="--", linewidth=1.2)
        ax.annotate(name, (value, top), textcoords="offset points", xytext=(-4, 0), ha="right", va="center",
                    color=PALETTE["grey"])
    ax.set_yticks(list(rows), list(bits))
    ax.set_ylim(-0.6, len(bits) + 0.1)
    values = [value for _, value in bits.values()]
    ax.set_xlim(min(*values, *span) - 0.1, max(*values, *baselines.values()) + 0.1)
    ax.set_xlabel("bits per character, held-out play (lower is better)")
    ax.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()
    return fig
