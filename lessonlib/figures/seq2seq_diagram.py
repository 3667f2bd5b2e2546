"""The encoder-decoder picture, drawn by code: the encoder reads the source, its final state
crosses over, the decoder writes the output; with attention, lines from every decoder step back
to every encoder state, each as wide as the weight the model put on it.

A single row, left to right, as in Alammar's illustrated seq2seq: encoder cells (source token
below each), the encoder's final state, decoder cells (input token below, written token above). The
page passes in the tokens and, for the attention picture, a trained model's weights.
`mirror_heatmap` draws the same weights as a grid, with the cells a reversal must read outlined.

The hand-over is labelled "final state", never "context": the lesson keeps that word for
attention's weighted sum of the encoder states.
"""
from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, Rectangle

from lessonlib.figures.diagrams import LIGHT, TEXT, _arrow, _box, _canvas
from lessonlib.figures.plots import PALETTE

GAP = 1.5                 # distance between neighbouring cells
CELL_W, CELL_H = 1.0, 0.7
MAX_LINE_WIDTH = 9.0      # line width (points) of an attention weight of 1
BEND = 0.45               # arcs bow upwards by BEND times their length (matplotlib's arc3 rad)


def encoder_decoder(source: Sequence[str], written: Sequence[str], hidden: int,
                    weights: torch.Tensor | None = None, cell: str = "GRU") -> Figure:
    """Encoder over ``source``, its final state of ``hidden`` numbers handed over, decoder writing ``written``.

    The decoder reads <s> and then each token it wrote. ``weights`` (len(written), len(source)),
    if given, are attention weights: one line from decoder step t to encoder state i, of width
    MAX_LINE_WIDTH * weights[t, i]. Rows must sum to 1.
    """
    n_in, n_out = len(source), len(written)
    if weights is not None:
        if tuple(weights.shape) != (n_out, n_in):
            raise ValueError(f"weights must be (written, source) = {(n_out, n_in)}, got {tuple(weights.shape)}")
        if not torch.allclose(weights.sum(-1), torch.ones(n_out), atol=1e-4):
            raise ValueError("each row of weights must sum to 1")
    enc_x = [GAP * i for i in range(n_in)]
    state_x = enc_x[-1] + GAP
    dec_x = [state_x + GAP * (t + 1) for t in range(n_out)]
    y_cell, y_token, y_written, y_label = 0.0, -0.95, 1.05, -1.65
    # the longest arc peaks BEND/2 of its length above the cells (a quadratic Bezier's apex)
    top = 2.0 if weights is None else CELL_H / 2 + BEND / 2 * (dec_x[-1] - enc_x[0]) + 0.9
    fig, ax = _canvas(0.62 * (dec_x[-1] + 1.8), 0.62 * (top + 2.2), (-0.9, dec_x[-1] + 0.9), (-2.0, top))

    _chain(ax, enc_x, cell, PALETTE["blue"], LIGHT["blue"], source, y_cell, y_token)
    _chain(ax, dec_x, cell, PALETTE["orange"], LIGHT["orange"], ["<s>", *written[:-1]], y_cell, y_token)
    for x, token in zip(dec_x, written):  # what each decoder step writes
        _arrow(ax, (x, y_cell + CELL_H / 2), (x, y_written - 0.2), color=PALETTE["orange"])
        ax.text(x, y_written, token, ha="center", va="bottom", fontsize=12, color=TEXT, weight="bold",
                zorder=3, bbox=dict(facecolor="white", edgecolor="none", pad=1))  # above the arcs
    ax.text((enc_x[0] + enc_x[-1]) / 2, y_label, "encoder: reads the source", ha="center", va="center",
            fontsize=10.5, color=TEXT, style="italic")
    ax.text((dec_x[0] + dec_x[-1]) / 2, y_label, "decoder: reads <s>, then what it wrote", ha="center",
            va="center", fontsize=10.5, color=TEXT, style="italic")

    # the one vector that crosses from encoder to decoder: the encoder's final state
    _arrow(ax, (enc_x[-1] + CELL_W / 2, y_cell), (state_x - 0.17, y_cell), color=PALETTE["blue"], width=2.2)
    _box(ax, state_x, y_cell, 0.3, 1.2, "", LIGHT["purple"], PALETTE["purple"])
    _arrow(ax, (state_x + 0.17, y_cell), (dec_x[0] - CELL_W / 2, y_cell), color=PALETTE["purple"], width=2.2)
    ax.text(state_x, y_token, f"final state:\n{hidden} numbers", ha="center", va="center", fontsize=10,
            color=TEXT)

    if weights is not None:
        for t, x_out in enumerate(dec_x):
            for i, x_in in enumerate(enc_x):
                w = float(weights[t, i])
                if w * MAX_LINE_WIDTH < 0.05:  # thinner than a hair: nothing to draw
                    continue
                ax.add_patch(FancyArrowPatch((x_out, y_cell + CELL_H / 2), (x_in, y_cell + CELL_H / 2),
                                             connectionstyle=f"arc3,rad={BEND}", arrowstyle="-",
                                             color=PALETTE["vermillion"], linewidth=MAX_LINE_WIDTH * w,
                                             alpha=0.75, shrinkA=0, shrinkB=0, zorder=1, label="attention"))
        ax.text((enc_x[0] + dec_x[-1]) / 2, top - 0.25,
                "attention: each decoder step reads every encoder state; line width = weight",
                ha="center", va="top", fontsize=10.5, color=TEXT, style="italic")
    return fig


def _chain(ax: Axes, xs: Sequence[float], label: str, edge: str, fill: str, tokens: Sequence[str],
           y_cell: float, y_token: float) -> None:
    """RNN cells at ``xs`` reading ``tokens`` from below, each passing its state to the right."""
    for k, (x, token) in enumerate(zip(xs, tokens)):
        _box(ax, x, y_cell, CELL_W, CELL_H, label, fill, edge, fontsize=9)
        ax.text(x, y_token, token, ha="center", va="center", fontsize=12, color=TEXT)
        _arrow(ax, (x, y_token + 0.25), (x, y_cell - CELL_H / 2))
        if k + 1 < len(xs):
            _arrow(ax, (x + CELL_W / 2, y_cell), (xs[k + 1] - CELL_W / 2, y_cell), color=edge, width=2.2)


def mirror_heatmap(weights: torch.Tensor, source: Sequence[str], written: Sequence[str]) -> Figure:
    """Attention weights (len(written), len(source)) of a model reversing ``source``, as a grid,
    with the mirror diagonal outlined.

    A row per written token (top to bottom), a column per source token, darker for more weight.
    Reversing T tokens, output step t (counting from 0) must write source position T - 1 - t: those cells,
    one per digit row (none for the rows past the source, such as </s>), get a thin outline, so the
    reader sees whether each row's weight falls on the mirror, beside it or elsewhere.
    """
    n_out, n_in = len(written), len(source)
    if tuple(weights.shape) != (n_out, n_in):
        raise ValueError(f"weights must be (written, source) = {(n_out, n_in)}, got {tuple(weights.shape)}")
    fig, ax = plt.subplots(figsize=(5.6, 5))
    fig.patch.set_facecolor("white")
    image = ax.imshow(weights.detach().cpu().numpy(), cmap="Blues", vmin=0, vmax=1)
    ax.set_xticks(range(n_in), list(source))
    ax.set_yticks(range(n_out), list(written))
    ax.set_xlabel("input token (read left to right)")
    ax.set_ylabel("output token (written top to bottom)")
    ax.spines[:].set_visible(True)
    for t, i in mirror_cells(n_in, n_out):
        ax.add_patch(Rectangle((i - 0.5, t - 0.5), 1, 1, fill=False, edgecolor=PALETTE["vermillion"],
                               linewidth=1.8, label="mirror" if t == 0 else "_mirror"))
    ax.legend(handles=[Rectangle((0, 0), 1, 1, fill=False, edgecolor=PALETTE["vermillion"], linewidth=1.8,
                                 label="mirror: input T\u22121\u2212t for output t")],
              loc="lower left", bbox_to_anchor=(0, 1.0), frameon=False, fontsize=9.5, borderaxespad=0.2)
    fig.colorbar(image, ax=ax, label="attention weight", fraction=0.046, pad=0.04)
    return fig


def mirror_cells(n_in: int, n_out: int) -> list[tuple[int, int]]:
    """(row, column) of the mirror diagonal: output step t reads source position n_in - 1 - t."""
    return [(t, n_in - 1 - t) for t in range(min(n_in, n_out))]
