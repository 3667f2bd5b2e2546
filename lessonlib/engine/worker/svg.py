"""Matplotlib figures as deterministic SVG text (the worker selects the Agg backend first;
a notebook keeps its own)."""
from __future__ import annotations

import io
import sys
import types
from collections.abc import Sequence

from lessonlib.engine.worker.after_import import when_imported
from lessonlib.engine.worker.outputs import DataTable

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
    """Close every figure, and apply the house style as matplotlib is imported (now, if it is
    loaded): each page starts from the same state."""
    _tables.clear()
    if _pyplot() is not None:
        _pyplot().close("all")
    when_imported("matplotlib", _house_style)


def _house_style(matplotlib: types.ModuleType) -> None:
    matplotlib.rcdefaults()
    matplotlib.rcParams.update(STYLE)


def _pyplot() -> types.ModuleType | None:
    """pyplot, if the page has imported it: a page that never did has drawn no figure."""
    return sys.modules.get("matplotlib.pyplot")


_tables: list[DataTable] = []  # figure_data calls since the last take_tables


def figure_data(columns: dict[str, Sequence], fmt: str = ".3g") -> None:
    """Offer the numbers a block's figure plots as a table, collapsed under the figure, for
    readers who cannot see it: ``figure_data({"distance": d, "RNN": g})``, one column each.
    Numbers are formatted with `fmt`, whole numbers as whole numbers (with `fmt`'s thousands
    separator), anything else with str."""
    lengths = {len(values) for values in columns.values()}
    if len(lengths) > 1:
        raise ValueError(f"figure_data: every column needs as many values, not {sorted(lengths)}")
    rows = zip(*columns.values())
    _tables.append(DataTable(list(columns), [[_cell(v, fmt) for v in row] for row in rows]))


def _cell(value: object, fmt: str) -> str:
    if hasattr(value, "item"):  # a NumPy or torch scalar
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int):  # a count or a position: "1,024", not "1,024.000"
        return format(value, ",d" if "," in fmt else "d")
    return format(value, fmt)


def take_tables() -> list[DataTable]:
    tables = _tables[:]
    _tables.clear()
    return tables


def take_figures() -> list[str]:
    """Return every open figure as SVG text, in creation order, and close them."""
    svgs, plt = [], _pyplot()
    for number in plt.get_fignums() if plt is not None else []:
        fig = plt.figure(number)
        buffer = io.StringIO()
        # A white background keeps figures legible on both palettes; dark mode restyles them in CSS.
        fig.savefig(buffer, format="svg", bbox_inches="tight", facecolor="white", metadata={"Date": None})
        plt.close(fig)
        svgs.append(buffer.getvalue())
    return svgs
