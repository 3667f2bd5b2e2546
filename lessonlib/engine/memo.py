"""Memoize expensive experiment functions across builds (joblib.Memory).

Keyed by the function's arguments and source (joblib), under a folder named by the environment
fingerprint and by the sources of the function's module and every lessonlib module it imports:
editing a helper the experiment calls, or changing a pinned version, starts afresh.
Outside a page run (or when re-execution is forced) the function simply runs.
"""
from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from pathlib import Path
from typing import TypeVar

import joblib

F = TypeVar("F", bound=Callable)
_location: ContextVar[Path | None] = ContextVar("memo_location", default=None)


def memo(func: F) -> F:
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        from lessonlib.engine.cache import code_fingerprint  # cache imports lessonlib, which imports us

        root = _location.get()
        if root is None:
            return func(*args, **kwargs)
        location = root / code_fingerprint(func.__module__)[:16]
        return joblib.Memory(location, verbose=0).cache(func)(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


@contextlib.contextmanager
def memo_location(path: Path | None) -> Iterator[None]:
    token = _location.set(path)
    try:
        yield
    finally:
        _location.reset(token)
