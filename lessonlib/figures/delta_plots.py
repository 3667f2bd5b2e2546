"""A figure of the delta-rule lesson, in the house style of lessonlib.figures.plots.

two_writes draws what a state returns for a key written twice (first v_old, then v_new): one
group of bars per component, the two values written and each state's read beside them.
"""
from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from torch import Tensor

from lessonlib.figures.plots import PALETTE


def two_writes(v_old: Tensor, v_new: Tensor, reads: dict[str, Tensor]) -> Figure:
    """v_old, v_new and each read (d,): bars per component, in the order old, new, then `reads`."""
    series = {"first value": v_old, "second value": v_new, **reads}
    colours = [PALETTE["grey"], PALETTE["green"], PALETTE["sky"], PALETTE["vermillion"], PALETTE["blue"]]
    d, n = len(v_new), len(series)
    width = 0.8 / n
    fig, ax = plt.subplots(figsize=(6.4, 3.2))
    for i, ((name, values), colour) in enumerate(zip(series.items(), colours)):
        ax.bar([j + (i - (n - 1) / 2) * width for j in range(d)], values.tolist(), width, label=name, color=colour)
    ax.axhline(0, color=PALETTE["grey"], linewidth=0.8)
    ax.set_xticks(range(d), [f"component {j + 1}" for j in range(d)])
    ax.set_ylabel("value")
    ax.legend(frameon=False, fontsize=8, ncols=2)
    fig.tight_layout()
    return fig
