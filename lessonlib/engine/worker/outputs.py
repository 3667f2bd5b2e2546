"""What running a page produces: each block's printed text and figures, and the inline values.
Plain data, shared by the worker that runs a page and the build that renders it."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Figure:
    svg: str
    alt: str  # the finding, for readers who cannot see it
    caption: str = ""  # shown under it; may say more than the alt text


@dataclass
class DataTable:
    """The numbers a figure plots, for readers who cannot see it (lessonlib.figure_data)."""

    columns: list[str]
    rows: list[list[str]]  # formatted cells


@dataclass
class Source:
    """A library object's code, as a source block shows it (lessonlib.engine.worker.shown.source_of)."""

    code: str  # dedented
    file: str  # relative to the folder its top-level package is in: lessonlib/experiments/gradient_reach.py
    line: int  # of its first line in that file


@dataclass
class Reference:
    """Where a function a block memoizes (``memo="lm.train_all"``) is defined: the site links the
    name in the shown code to those lines."""

    name: str  # its last part, as the code calls it: train_all
    file: str  # as Source.file
    line: int


@dataclass
class BlockOutput:
    text: str = ""
    figures: list[Figure] = field(default_factory=list)
    tables: list[DataTable] = field(default_factory=list)  # one per figure_data call
    source: Source | None = None  # a source block's
    calls: list[Reference] = field(default_factory=list)  # the functions its memo= option names

    @property
    def size(self) -> int:
        """Bytes this output adds to the page (text, SVG and tables)."""
        cells = sum(len(c.encode()) for t in self.tables for row in [t.columns, *t.rows] for c in row)
        shown = len(self.source.code.encode()) if self.source else 0
        return shown + len(self.text.encode()) + sum(len(f.svg.encode()) for f in self.figures) + cells


@dataclass
class PageOutputs:
    blocks: list[BlockOutput]  # one per block, in the page's order
    values: dict[str, str]  # inline values, by their source (`{py} x:.2f` -> "x:.2f")
    published: dict[str, bytes] = field(default_factory=dict)  # lessonlib.publish: written beside the page
    # The blocks' fence lines (0-based) where the page stood when these were made; empty: where it
    # stands now. A cached page's prose may have moved its blocks since (build.render.relocated).
    fences: list[int] = field(default_factory=list)
