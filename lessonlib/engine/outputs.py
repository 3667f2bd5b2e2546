"""What running a page produces: each block's printed text and figures, and the inline values.
Plain data, shared by the worker that runs a page and the build that renders it."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Figure:
    svg: str
    alt: str


@dataclass
class BlockOutput:
    text: str = ""
    figures: list[Figure] = field(default_factory=list)

    @property
    def size(self) -> int:
        """Bytes this output adds to the page (text and SVG)."""
        return len(self.text.encode()) + sum(len(f.svg.encode()) for f in self.figures)


PageOutputs = tuple[list[BlockOutput], dict[str, str]]  # per-block outputs, inline values by source
