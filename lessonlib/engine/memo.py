"""Memoize expensive experiment functions across builds (joblib.Memory).

Keyed by the function's arguments and source; the store lives under a folder named by the
environment fingerprint, so a change anywhere in lessonlib or in a pinned version starts afresh.
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
        location = _location.get()
        if location is None:
            return func(*args, **kwargs)
        return joblib.Memory(location, verbose=0).cache(func)(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


@contextlib.contextmanager
def memo_location(path: Path | None) -> Iterator[None]:
    token = _location.set(path)
    try:
        yield
    finally:
        _location.reset(token)
