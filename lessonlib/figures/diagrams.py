"""Diagrams drawn by code for the recurrent-networks and gates-and-attention lessons.

One function per figure; each returns a matplotlib Figure on a white background, in the
colour-blind-safe palette of lessonlib.figures.plots, with no randomness (the same call draws the same
picture). Where a diagram can show numbers the lesson computed (the hidden states of the
unrolled RNN, the evidence in the summary table), the page passes them in.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Circle, FancyArrowPatch, FancyBboxPatch, Rectangle

from lessonlib.figures.plots import PALETTE

TEXT = "#222222"
LIGHT = {  # pale fills that keep black text readable
    "blue": "#D6EAF8",
    "sky": "#E3F2FB",
    "orange": "#FBEBC9",
    "green": "#CDEFE5",
    "vermillion": "#F8DCCB",
    "purple": "#F4E0EC",
    "grey": "#EEEEEE",
}


def _canvas(width: float, height: float, xlim: tuple[float, float], ylim: tuple[float, float]) -> tuple[Figure, Axes]:
    fig, ax = plt.subplots(figsize=(width, height))
    fig.patch.set_facecolor("white")
    ax.set_xlim(*xlim)
    ax.set_ylim(*ylim)
    ax.set_aspect("equal")
    ax.axis("off")
    return fig, ax


def _box(ax: Axes, x: float, y: float, w: float, h: float, text: str, fill: str, edge: str,
         fontsize: float = 11, **text_kw) -> FancyBboxPatch:
    """A rounded box centred on (x, y) with centred text."""
    box = FancyBboxPatch((x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0.02,rounding_size=0.12",
                         facecolor=fill, edgecolor=edge, linewidth=1.6)
    ax.add_patch(box)
    ax.text(x, y, text, ha="center", va="center", fontsize=fontsize, color=TEXT, **text_kw)
    return box


def _arrow(ax: Axes, start: tuple[float, float], end: tuple[float, float], color: str = TEXT,
           width: float = 1.6, style: str = "-|>", **kw) -> FancyArrowPatch:
    arrow = FancyArrowPatch(start, end, arrowstyle=style, mutation_scale=14, color=color,
                            linewidth=width, shrinkA=0, shrinkB=0, **kw)
    ax.add_patch(arrow)
    return arrow


def _vector(values: Sequence[float]) -> str:
    return "[" + ", ".join(f"{v:.2f}".replace("-", "\u2212") for v in values) + "]"


def unrolled_rnn(words: Sequence[str] = ("dog", "bites", "man"),
                 states: Sequence[Sequence[float]] | None = None) -> Figure:
    """One RNN cell, copied once per word, reading `words` left to right.

    Each copy takes the word's embedding x_t from below and the previous hidden state from the
    left, and passes its new hidden state h_t to the right; all copies share W_x, W_h and b.
    `states`, if given, are the hidden states the lesson computed, printed above each step.
    """
    n = len(words)
    if states is not None and len(states) != n:
        raise ValueError(f"need one state per word: {n} words, {len(states)} states")
    gap = 3.3
    xs = [2.0 + gap * t for t in range(n)]
    right = xs[-1] + 3.0
    fig, ax = _canvas(right * 0.78, 4.2 * 0.78, (-0.3, right), (-0.8, 3.6))
    y_word, y_cell, y_state = 0.0, 1.45, 2.95

    # h_0 enters from the left
    ax.text(0.05, y_cell, "$h_0 = 0$", ha="center", va="center", fontsize=11, color=TEXT)
    _arrow(ax, (0.55, y_cell), (xs[0] - 0.77, y_cell), color=PALETTE["blue"], width=2.2)
    for t, (x, word) in enumerate(zip(xs, words), start=1):
        _box(ax, x, y_word, 1.2, 0.55, word, LIGHT["sky"], PALETTE["sky"], fontsize=12)
        ax.text(x + 0.12, (y_word + y_cell) / 2 - 0.05, f"$x_{t}$", ha="left", va="center", fontsize=11, color=TEXT)
        _arrow(ax, (x, y_word + 0.3), (x, y_cell - 0.42))
        _box(ax, x, y_cell, 1.5, 0.8, "RNN cell", LIGHT["orange"], PALETTE["orange"], fontsize=11)
        _arrow(ax, (x, y_cell + 0.42), (x, y_state - 0.4), color=PALETTE["blue"])
        label = f"$h_{t}$" if states is None else f"$h_{t}$ =\n{_vector(states[t - 1])}"
        ax.text(x, y_state, label, ha="center", va="center", fontsize=10.5, color=PALETTE["blue"])
        if t < n:  # the recurrent connection: h_t is the next cell's h_{t-1}
            _arrow(ax, (x + 0.77, y_cell), (xs[t] - 0.77, y_cell), color=PALETTE["blue"], width=2.2)
            ax.text((x + xs[t]) / 2, y_cell + 0.12, f"$h_{t}$", ha="center", va="bottom", fontsize=11,
                    color=PALETTE["blue"])
    _arrow(ax, (xs[-1] + 0.77, y_cell), (xs[-1] + 1.4, y_cell), color=PALETTE["blue"], width=2.2)
    ax.text(xs[-1] + 1.5, y_cell, "final state:\nsummary of\nthe sentence", ha="left", va="center",
            fontsize=10.5, color=PALETTE["blue"])
    ax.text((xs[0] + xs[-1]) / 2, -0.65, "every copy of the cell uses the same $W_x$, $W_h$ and $b$",
            ha="center", va="center", fontsize=10.5, color=PALETTE["grey"], style="italic")
    return fig


def lstm_cell() -> Figure:
    """The LSTM cell: the cell line c_{t-1} -> x f -> + i*g -> c_t across the top, the gates below.

    The forget gate scales the old memory, the input gate scales the candidate that is added,
    and the output gate decides how much of tanh(c_t) becomes the hidden state h_t.
    """
    fig, ax = _canvas(8.6, 4.9, (-0.2, 11.4), (-0.95, 5.2))
    y_line, y_mid, y_gate, y_bus = 4.2, 2.95, 1.55, 0.35
    x_f, x_i, x_g, x_o = 2.9, 4.75, 6.45, 8.1
    x_add, x_out = 5.6, 9.3
    cell, gate_edge = PALETTE["blue"], TEXT

    def op(x: float, y: float, symbol: str, color: str = TEXT) -> None:
        ax.add_patch(Circle((x, y), 0.27, facecolor="white", edgecolor=color, linewidth=1.6, zorder=3))
        ax.text(x, y, symbol, ha="center", va="center", fontsize=13, color=color, zorder=4)

    # the cell line: the LSTM's long-term memory
    ax.text(0.05, y_line, "$c_{t-1}$", ha="left", va="center", fontsize=12, color=cell)
    _arrow(ax, (0.75, y_line), (x_f - 0.29, y_line), color=cell, width=3)
    _arrow(ax, (x_f + 0.29, y_line), (x_add - 0.29, y_line), color=cell, width=3)
    _arrow(ax, (x_add + 0.29, y_line), (10.45, y_line), color=cell, width=3)
    ax.text(10.55, y_line, "$c_t$", ha="left", va="center", fontsize=12, color=cell)
    op(x_f, y_line, "\u00d7", cell)
    op(x_add, y_line, "+", cell)
    ax.text((x_f + x_add) / 2, y_line + 0.5,
            "cell line: memory is only scaled by f and added to, never squashed",
            ha="center", va="bottom", fontsize=10, color=cell, style="italic")

    # the gates read [h_{t-1}, x_t] from the bus below
    gates = [
        (x_f, "$\\sigma$\nforget f", "vermillion"),
        (x_i, "$\\sigma$\ninput i", "green"),
        (x_g, "tanh\ncandidate g", "sky"),
        (x_o, "$\\sigma$\noutput o", "purple"),
    ]
    ax.plot([1.2, x_o], [y_bus, y_bus], color=gate_edge, linewidth=1.6)
    ax.text(0.05, y_bus, "$h_{t-1}$", ha="left", va="center", fontsize=12, color=TEXT)
    _arrow(ax, (0.75, y_bus), (1.2, y_bus), style="-")
    _arrow(ax, (2.0, -0.75), (2.0, y_bus), style="-")
    ax.text(2.12, -0.6, "$x_t$", ha="left", va="center", fontsize=12, color=TEXT)
    for x, label, colour in gates:
        _arrow(ax, (x, y_bus), (x, y_gate - 0.45))
        _box(ax, x, y_gate, 1.5, 0.85, label, LIGHT[colour], PALETTE[colour], fontsize=10)

    # forget gate -> multiply the old memory
    _arrow(ax, (x_f, y_gate + 0.45), (x_f, y_line - 0.29), color=PALETTE["vermillion"])
    # input gate * candidate -> added to the memory
    op(x_add, y_mid, "\u00d7")
    _arrow(ax, (x_i, y_gate + 0.45), (x_add - 0.22, y_mid - 0.17), color=PALETTE["green"])
    _arrow(ax, (x_g, y_gate + 0.45), (x_add + 0.22, y_mid - 0.17), color=PALETTE["sky"])
    _arrow(ax, (x_add, y_mid + 0.29), (x_add, y_line - 0.29))
    # output: h_t = o * tanh(c_t)
    _arrow(ax, (x_out, y_line), (x_out, y_mid + 0.33), color=cell)
    _box(ax, x_out, y_mid, 0.8, 0.6, "tanh", "white", TEXT, fontsize=10)
    op(x_out, y_gate, "\u00d7")
    _arrow(ax, (x_out, y_mid - 0.3), (x_out, y_gate + 0.29))
    _arrow(ax, (x_o + 0.76, y_gate), (x_out - 0.29, y_gate), color=PALETTE["purple"])
    _arrow(ax, (x_out + 0.29, y_gate), (10.45, y_gate))
    ax.text(10.55, y_gate, "$h_t$", ha="left", va="center", fontsize=12, color=TEXT)

    ax.text(5.6, -0.6, "$c_t = f \\odot c_{t-1} + i \\odot g$        $h_t = o \\odot \\tanh(c_t)$",
            ha="center", va="center", fontsize=11, color=TEXT)
    return fig


def recurrence_vs_attention(n: int = 6) -> Figure:
    """Two ways for the last position to use the first: a chain of n recurrent steps, or one
    direct causal-attention connection to every position at or before it."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.9))
    fig.patch.set_facecolor("white")
    y_in, y_out = 0.0, 1.6
    for ax in (left, right):
        ax.set_xlim(0.3, n + 0.7)
        ax.set_ylim(-0.75, 2.55)
        ax.axis("off")
        for t in range(1, n + 1):
            _box(ax, t, y_in, 0.62, 0.42, f"$x_{{{t}}}$", LIGHT["sky"], PALETTE["sky"], fontsize=11)

    # recurrent chain: x_t -> h_t -> h_{t+1}
    left.set_title("recurrence: a chain of steps", fontsize=12, color=TEXT)
    for t in range(1, n + 1):
        _arrow(left, (t, y_in + 0.23), (t, y_out - 0.23), color=PALETTE["grey"], width=1.2)
        left.add_patch(Circle((t, y_out), 0.22, facecolor=LIGHT["blue"], edgecolor=PALETTE["blue"], linewidth=1.6))
        left.text(t, y_out, f"$h_{{{t}}}$", ha="center", va="center", fontsize=10, color=TEXT)
        if t < n:
            _arrow(left, (t + 0.22, y_out), (t + 0.78, y_out), color=PALETTE["blue"], width=2.4)
    left.text((n + 1) / 2, 2.25, f"$x_1$ reaches $h_{{{n}}}$ only through {n} steps in a row",
              ha="center", va="center", fontsize=11, color=PALETTE["blue"])

    # causal attention: output i looks directly at every x_j with j <= i
    right.set_title("causal attention: direct connections", fontsize=12, color=TEXT)
    for i in range(1, n + 1):
        for j in range(1, i + 1):
            last = i == n
            right.plot([j, i], [y_in + 0.23, y_out - 0.22], color=PALETTE["vermillion"] if last else "#BBBBBB",
                       linewidth=2.0 if last else 0.9, zorder=2 if last else 1, solid_capstyle="round")
        right.add_patch(Circle((i, y_out), 0.22, facecolor=LIGHT["vermillion"], edgecolor=PALETTE["vermillion"],
                               linewidth=1.6, zorder=3))
        right.text(i, y_out, f"$z_{{{i}}}$", ha="center", va="center", fontsize=10, color=TEXT, zorder=4)
    right.text((n + 1) / 2, 2.25, f"$z_{{{n}}}$ is one step from every $x_j$; no line reaches the future",
               ha="center", va="center", fontsize=11, color=PALETTE["vermillion"])
    for ax in (left, right):
        ax.set_aspect("equal")
    fig.tight_layout()
    return fig


SUMMARY_ROWS = ("recurrence (RNN)", "gates: LSTM", "gates: GRU", "attention")
SUMMARY_COLUMNS = ("word order", "long-range learning", "fixed-size memory", "one step at a time")
_VERDICT_STYLE = {  # verdict -> (fill, edge); the verdict is also written in the cell, so colour is never the only cue
    "solved": (LIGHT["green"], PALETTE["green"]),
    "partly": (LIGHT["orange"], PALETTE["orange"]),
    "open": (LIGHT["vermillion"], PALETTE["vermillion"]),
}
SUMMARY_VERDICTS = {
    ("recurrence (RNN)", "word order"): ("solved", "order changes the state"),
    ("recurrence (RNN)", "long-range learning"): ("open", "gradient vanishes"),
    ("recurrence (RNN)", "fixed-size memory"): ("open", "one hidden state"),
    ("recurrence (RNN)", "one step at a time"): ("open", "each step waits"),
    ("gates: LSTM", "word order"): ("solved", "order changes the state"),
    ("gates: LSTM", "long-range learning"): ("partly", "if the forget gate\nstarts open"),
    ("gates: LSTM", "fixed-size memory"): ("open", "hidden and cell state"),
    ("gates: LSTM", "one step at a time"): ("open", "each step waits"),
    ("gates: GRU", "word order"): ("solved", "order changes the state"),
    ("gates: GRU", "long-range learning"): ("partly", "if the update gate\nstarts near keep"),
    ("gates: GRU", "fixed-size memory"): ("open", "one hidden state"),
    ("gates: GRU", "one step at a time"): ("open", "each step waits"),
    ("attention", "word order"): ("partly", "needs position\ninformation"),
    ("attention", "long-range learning"): ("solved", "every position\none step away"),
    ("attention", "fixed-size memory"): ("solved", "a vector per position\n(cost: n\u00b2 scores)"),
    ("attention", "one step at a time"): ("partly", "parallel in training;\ngeneration still\ntoken by token"),
}


def summary_table(evidence: Mapping[tuple[str, str], str] | None = None) -> Figure:
    """What recurrence, gates and attention each solve and leave open, as a coloured table.

    Rows are SUMMARY_ROWS, columns SUMMARY_COLUMNS; each cell states its verdict in words
    ("solved", "partly", "open") with a short reason. `evidence` maps (row, column) to a short
    measured fact from the lesson (at most two short lines), written in small italics under the reason.
    """
    evidence = dict(evidence or {})
    unknown = set(evidence) - set(SUMMARY_VERDICTS)
    if unknown:
        raise KeyError(f"no such cells: {sorted(unknown)}")
    cw, ch, head_w, head_h = 2.9, 1.9, 2.7, 0.7
    rows, cols = len(SUMMARY_ROWS), len(SUMMARY_COLUMNS)
    width, height = head_w + cols * cw, head_h + rows * ch
    fig, ax = _canvas(width * 0.92, height * 0.92, (-0.05, width + 0.05), (-0.05, height + 0.05))
    for c, column in enumerate(SUMMARY_COLUMNS):
        ax.text(head_w + (c + 0.5) * cw, height - head_h / 2, column, ha="center", va="center",
                fontsize=11.5, weight="bold", color=TEXT)
    for r, row in enumerate(SUMMARY_ROWS):
        y = height - head_h - (r + 1) * ch
        ax.text(0.1, y + ch / 2, row, ha="left", va="center", fontsize=11.5, weight="bold", color=TEXT)
        for c, column in enumerate(SUMMARY_COLUMNS):
            verdict, reason = SUMMARY_VERDICTS[(row, column)]
            fill, edge = _VERDICT_STYLE[verdict]
            x = head_w + c * cw
            ax.add_patch(Rectangle((x + 0.06, y + 0.06), cw - 0.12, ch - 0.12, facecolor=fill, edgecolor=edge,
                                   linewidth=1.4))
            ax.text(x + cw / 2, y + ch - 0.3, verdict, ha="center", va="center", fontsize=11, weight="bold",
                    color=TEXT)
            note = evidence.get((row, column))
            ax.text(x + cw / 2, y + ch / 2 + (0.08 if note else -0.1), reason, ha="center", va="center",
                    fontsize=9.5, color=TEXT, linespacing=1.1)
            if note:
                ax.text(x + cw / 2, y + 0.38, note, ha="center", va="center", fontsize=9,
                        color=PALETTE["blue"], style="italic", linespacing=1.1)
    return fig
