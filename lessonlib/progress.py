"""Progress bars for long experiments: on the build's terminal, never inside the page."""
from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import TypeVar

T = TypeVar("T")


def progress(items: Iterable[T], description: str, total: int | None = None, enabled: bool = True) -> Iterable[T]:
    from tqdm import tqdm  # here: `import lessonlib` in the build process must stay light

    # sys.__stderr__, not sys.stderr: while a page runs, sys.stderr is captured into the page.
    return tqdm(items, desc=description, total=total, file=sys.__stderr__, disable=not enabled, leave=False)
