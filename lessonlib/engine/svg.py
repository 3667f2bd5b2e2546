"""Matplotlib figures as deterministic SVG text (the worker selects the Agg backend first;
a notebook keeps its own)."""
from __future__ import annotations

import io

import matplotlib
import matplotlib.pyplot as plt

# Fixed ids and no date stamp: the same figure gives the same bytes on every build.
# Text stays text (smaller files, selectable, searchable by the browser).
STYLE = {
    "svg.hashsalt": "lessonlib",
    "svg.fonttype": "none",
    "font.family": "sans-serif",
    "font.size": 11,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "figure.figsize": (6.4, 3.6),
}


def reset() -> None:
    """Close every figure and apply the house style (each page starts from the same state)."""
    plt.close("all")
    matplotlib.rcdefaults()
    matplotlib.rcParams.update(STYLE)


def take_figures() -> list[str]:
    """Return every open figure as SVG text, in creation order, and close them."""
    svgs = []
    for number in plt.get_fignums():
        fig = plt.figure(number)
        buffer = io.StringIO()
        # A white background keeps figures legible on both palettes; dark mode restyles them in CSS.
        fig.savefig(buffer, format="svg", bbox_inches="tight", facecolor="white", metadata={"Date": None})
        plt.close(fig)
        svgs.append(buffer.getvalue())
    return svgs
