"""Progress bars for long experiments: on the build's terminal, never inside the page; in a
notebook, in the running cell, gone when the loop ends (a reader waiting on a cell sees the work
move, and the finished cell shows what the page shows)."""
from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import TypeVar

T = TypeVar("T")


def progress(items: Iterable[T], description: str, total: int | None = None, enabled: bool = True) -> Iterable[T]:
    from tqdm import tqdm  # here: `import lessonlib` in the build process must stay light

    from lessonlib.engine.worker.capture import terminal  # not sys.stderr: while a page runs, that is the page's

    # A Jupyter kernel shows its sys.stderr in the running cell (text: no widget library needed)
    where = sys.stderr if type(sys.stderr).__module__ == "ipykernel.iostream" else terminal()
    return tqdm(items, desc=description, total=total, file=where, disable=not enabled, leave=False)
