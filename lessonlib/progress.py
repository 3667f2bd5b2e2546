"""Progress bars for long experiments: on the build's terminal, never inside the page."""
from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar

T = TypeVar("T")


def progress(items: Iterable[T], description: str, total: int | None = None, enabled: bool = True) -> Iterable[T]:
    from tqdm import tqdm  # here: `import lessonlib` in the build process must stay light

    from lessonlib.engine.worker.capture import terminal  # not sys.stderr: while a page runs, that is the page's

    return tqdm(items, desc=description, total=total, file=terminal(), disable=not enabled, leave=False)
