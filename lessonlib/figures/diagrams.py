"""Diagrams drawn by code for the recurrent-networks, gates-and-attention and transformer lessons.

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


def recurrence_vs_attention(n: int = 6, steps_per_state: int | None = None) -> Figure:
    """Two ways for the last position to use the first: a chain of n recurrent states, or one
    direct causal-attention connection to every position at or before it. steps_per_state: the
    sequential steps of one state (lessonlib.experiments.cost), written under the chain if given."""
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
    each = "" if steps_per_state is None else f",\n{steps_per_state} sequential steps each"
    left.text((n + 1) / 2, 2.25, f"$x_1$ reaches $h_{{{n}}}$ only through {n} states in a row{each}",
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
    right.text((n + 1) / 2, 2.25, f"$z_{{{n}}}$ reads every $x_j$ directly; no line reaches the future",
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
    ("attention", "long-range learning"): ("solved", "reads every input\ndirectly"),
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


BLOCK_PARTS = ("norm1", "self_attn", "norm2", "linear1", "linear2")  # Block's children, in the order x meets them


def transformer_block(block) -> Figure:
    """A pre-LN transformer block (lessonlib.models.transformer.Block, or any module with its parts),
    drawn left to right along its residual stream.

    The stream x (one vector of d numbers per position) runs along the bottom and is only added to,
    twice: first by attention, which reads a LayerNorm'd copy (norm1 -> self_attn), then by the MLP,
    which reads another (norm2 -> linear1 -> GELU -> linear2). Each box is labelled with the
    block's own attribute name and the size it works at, read from `block`, so the picture cannot
    drift from the code.
    """
    missing = [name for name in BLOCK_PARTS if not hasattr(block, name)]
    if missing:
        raise ValueError(f"not a transformer block: no {', '.join(missing)}")
    d, d_ff = block.linear1.in_features, block.linear1.out_features
    heads = getattr(block.self_attn, "heads", None)
    attention = "attention" if heads is None else f"attention, {heads} head{'s' * (heads != 1)}"
    arrow = "\u2192"
    fig, ax = _canvas(17.5 * 0.6, 4.9 * 0.6, (-0.3, 17.2), (-1.35, 3.55))
    y_stream, y_part, gap = 0.0, 1.75, 0.45
    stream = PALETTE["blue"]

    def row(start: float, widths: dict[str, float]) -> dict[str, tuple[float, float]]:
        """Boxes left to right from `start`, `gap` apart: name -> (centre, width)."""
        placed, left = {}, start
        for name, w in widths.items():
            placed[name] = (left + w / 2, w)
            left += w + gap
        return placed

    def layer(name: str, what: str, colour: str) -> None:
        x, w = parts[name]
        _box(ax, x, y_part, w, 0.95, "", LIGHT[colour], PALETTE[colour])
        ax.text(x, y_part + 0.2, name, ha="center", va="center", fontsize=10.5, color=TEXT, family="monospace")
        ax.text(x, y_part - 0.2, what, ha="center", va="center", fontsize=9.5, color=TEXT)

    def add(x: float) -> None:
        ax.add_patch(Circle((x, y_stream), 0.27, facecolor="white", edgecolor=stream, linewidth=1.8, zorder=3))
        ax.text(x, y_stream, "+", ha="center", va="center", fontsize=14, color=stream, zorder=4)

    def branch(names: list[str], x_from: float, x_add: float, colour: str) -> None:
        """Off the stream at x_from, up and through `names` in turn, then down into the addition at x_add."""
        ax.plot([x_from, x_from], [y_stream, y_part], color=stream, linewidth=1.6)
        first, last = parts[names[0]], parts[names[-1]]
        _arrow(ax, (x_from, y_part), (first[0] - first[1] / 2, y_part), color=stream)
        for a, b in zip(names, names[1:]):
            _arrow(ax, (parts[a][0] + parts[a][1] / 2, y_part), (parts[b][0] - parts[b][1] / 2, y_part))
        ax.plot([last[0] + last[1] / 2, x_add], [y_part, y_part], color=PALETTE[colour], linewidth=1.6)
        _arrow(ax, (x_add, y_part), (x_add, y_stream + 0.27), color=PALETTE[colour])

    split_1 = 0.55
    parts = row(split_1 + gap, {"norm1": 1.8, "self_attn": 2.75})
    add_1 = parts["self_attn"][0] + parts["self_attn"][1] / 2 + 0.7
    split_2 = add_1 + 0.7
    parts |= row(split_2 + gap, {"norm2": 1.8, "linear1": 1.6, "GELU": 1.0, "linear2": 1.6})
    add_2 = parts["linear2"][0] + parts["linear2"][1] / 2 + 0.7
    end = add_2 + 0.9

    # the residual stream: in, two additions, out
    ax.text(0.0, y_stream + 0.2, "x", ha="left", va="bottom", fontsize=11, color=TEXT, weight="bold")
    ax.text(0.0, y_stream - 0.2, f"{d} numbers\nper position", ha="left", va="top", fontsize=9.5, color=TEXT)
    _arrow(ax, (0.0, y_stream), (add_1 - 0.27, y_stream), color=stream, width=3)
    _arrow(ax, (add_1 + 0.27, y_stream), (add_2 - 0.27, y_stream), color=stream, width=3)
    _arrow(ax, (add_2 + 0.27, y_stream), (end, y_stream), color=stream, width=3)
    add(add_1)
    add(add_2)
    ax.text(end, y_stream + 0.2, "x", ha="right", va="bottom", fontsize=11, color=TEXT, weight="bold")
    ax.text((split_1 + end) / 2 + 0.6, y_stream - 0.8,
            "residual stream: each part's output is added to x, never put in its place",
            ha="center", va="center", fontsize=10, color=stream, style="italic")

    # attention: tokens exchange information
    layer("norm1", "LayerNorm", "grey")
    layer("self_attn", attention, "vermillion")
    branch(["norm1", "self_attn"], split_1, add_1, "vermillion")
    ax.text(parts["self_attn"][0], y_part + 0.85, "attention: between positions", ha="center", va="center", fontsize=10,
            color=TEXT, style="italic")

    # the MLP: each position alone, d -> d_ff -> d
    layer("norm2", "LayerNorm", "grey")
    layer("linear1", f"{d} {arrow} {d_ff}", "green")
    _box(ax, parts["GELU"][0], y_part, parts["GELU"][1], 0.95, "GELU", "white", TEXT, fontsize=10)
    layer("linear2", f"{d_ff} {arrow} {d}", "green")
    branch(["norm2", "linear1", "GELU", "linear2"], split_2, add_2, "green")
    mlp_left = parts["linear1"][0] - parts["linear1"][1] / 2 - 0.2
    mlp_right = parts["linear2"][0] + parts["linear2"][1] / 2 + 0.2
    ax.add_patch(FancyBboxPatch((mlp_left, y_part - 0.65), mlp_right - mlp_left, 1.3,
                                boxstyle="round,pad=0,rounding_size=0.15", fill=False, edgecolor=PALETTE["green"],
                                linewidth=1.2, linestyle=(0, (4, 3)), label="MLP"))
    ax.text((mlp_left + mlp_right) / 2, y_part + 0.85, "MLP: each position alone", ha="center", va="center",
            fontsize=10, color=TEXT, style="italic")
    return fig


def qkv_shapes(n: int, d: int, d_k: int) -> Figure:
    """Self-attention's matrices as boxes in proportion to their shapes, one cell per number.

    Left, the three maps of one sequence: X (n, d) times W_q^T, W_k^T, W_v^T (each (d, d_k)) gives
    Q, K and V (each (n, d_k)). Right, attention: Q times K^T gives the (n, n) scores; a softmax over
    each row (after dividing by sqrt(d_k)) turns them into weights, each row summing to 1; the
    weights times V give the output (n, d_k). The page passes the sizes of its own tensors.
    Every box is a Rectangle labelled "matrix NAME", NAME as written above it.
    """
    if min(n, d, d_k) < 1:
        raise ValueError(f"sizes must be positive, got n={n}, d={d}, d_k={d_k}")
    u = min(0.22, 2.2 / max(n, d, d_k))  # side of one cell
    tallest = max(n, d, d_k) * u
    row_h = tallest + 1.25
    op_w = 0.7
    qkv = {"Q": ("q", "vermillion"), "K": ("k", "green"), "V": ("v", "purple")}

    def matrix(left: float, y: float, rows: int, cols: int, name: str, colour: str,
               shaded_row: int | None = None) -> float:
        """Draw a rows x cols box whose left edge is at `left`, centred on y; return its right edge."""
        w, h = cols * u, rows * u
        bottom = y - h / 2
        ax.add_patch(Rectangle((left, bottom), w, h, facecolor=LIGHT[colour], edgecolor=PALETTE[colour],
                               linewidth=1.5, label=f"matrix {name}", zorder=2))
        if shaded_row is not None:  # one row picked out, counted from the top
            ax.add_patch(Rectangle((left, bottom + h - (shaded_row + 1) * u), w, u, facecolor=PALETTE[colour],
                                   alpha=0.45, edgecolor="none", zorder=2))
        for i in range(1, rows):
            ax.plot([left, left + w], [bottom + i * u] * 2, color=PALETTE[colour], linewidth=0.4, alpha=0.6, zorder=3)
        for j in range(1, cols):
            ax.plot([left + j * u] * 2, [bottom, bottom + h], color=PALETTE[colour], linewidth=0.4, alpha=0.6, zorder=3)
        ax.text(left + w / 2, bottom + h + 0.12, name, ha="center", va="bottom", fontsize=11.5, color=TEXT)
        ax.text(left + w / 2, bottom - 0.12, f"{rows} \u00d7 {cols}", ha="center", va="top", fontsize=9.5,
                color=TEXT)
        return left + w

    def op(x: float, y: float, symbol: str) -> float:
        ax.text(x + op_w / 2, y, symbol, ha="center", va="center", fontsize=22 if symbol == "\u00b7" else 15,
                color=TEXT, weight="bold")
        return x + op_w

    left_w = d * u + d_k * u + d_k * u + 2 * op_w
    right_x = left_w + 1.4
    right_w = max(d_k * u + n * u + n * u, n * u + 2.6 + n * u, n * u + d_k * u + d_k * u) + 2 * op_w
    width = right_x + right_w
    top = 0.9
    bottom = -3 * row_h - 0.45
    fig, ax = _canvas((width + 0.4) * 0.72, (top - bottom + 0.2) * 0.72, (-0.2, width + 0.2), (bottom, top))
    ax.text(left_w / 2, top - 0.3, "three maps of one sequence", ha="center", va="center", fontsize=11,
            color=TEXT, weight="bold")
    ax.text(right_x + right_w / 2, top - 0.3, "attention", ha="center", va="center", fontsize=11,
            color=TEXT, weight="bold")
    ys = [-(k + 0.5) * row_h + 0.15 for k in range(3)]

    # left: X W^T = Q, K, V
    for y, (name, (sub, colour)) in zip(ys, qkv.items()):
        x = matrix(0.0, y, n, d, "$X$", "sky")
        x = op(x, y, "\u00b7")
        x = matrix(x, y, d, d_k, f"$W_{sub}^\\top$", "grey")
        x = op(x, y, "=")
        matrix(x, y, n, d_k, f"${name}$", colour)

    # right: Q K^T = scores; softmax of each row = weights; weights V = output
    y = ys[0]
    x = matrix(right_x, y, n, d_k, "$Q$", "vermillion")
    x = op(x, y, "\u00b7")
    x = matrix(x, y, d_k, n, "$K^\\top$", "green")
    x = op(x, y, "=")
    matrix(x, y, n, n, "scores", "orange")
    y = ys[1]
    x = matrix(right_x, y, n, n, "scores", "orange")
    _arrow(ax, (x + 0.15, y), (x + 2.45, y))
    ax.text(x + 1.3, y + 0.12, f"\u00f7 \u221a{d_k}, then\nsoftmax of\neach row", ha="center", va="bottom",
            fontsize=9.5, color=TEXT, linespacing=1.1)
    x = matrix(x + 2.6, y, n, n, "weights", "orange", shaded_row=0)
    ax.text(x + 0.12, y + n * u / 2 - u / 2, "\u2190 each row\nsums to 1", ha="left", va="center", fontsize=9,
            color=TEXT, linespacing=1.1)
    y = ys[2]
    x = matrix(right_x, y, n, n, "weights", "orange")
    x = op(x, y, "\u00b7")
    x = matrix(x, y, n, d_k, "$V$", "purple")
    x = op(x, y, "=")
    matrix(x, y, n, d_k, "output", "blue")
    ax.text(0.0, bottom + 0.05, "one cell per number; X, Q, K, V, the scores, the weights and the output "
            "have one row per position", ha="left", va="bottom",
            fontsize=9.5, color=PALETTE["grey"], style="italic")
    return fig
