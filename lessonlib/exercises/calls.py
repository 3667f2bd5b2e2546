"""Calling a reader's function from a checker: its result, or one line saying how it failed; and
the ends of a training run's losses, which the outcome checkers read."""
from __future__ import annotations

from collections.abc import Callable

from torch import Tensor

STUB = "is still the stub: replace `raise NotImplementedError` with your code."


def call(name: str, fn: Callable, *args: object) -> tuple[object, str | None]:
    """fn(*args), or a one-line message naming the function, the error and the arguments' shapes."""
    try:
        return fn(*args), None
    except NotImplementedError:
        return None, f"{name}() {STUB}"
    except Exception as e:  # the reader's bug, reported in one line
        return None, f"{name}() raised {type(e).__name__}: {e}. It was called with {_describe(args)}."


def _describe(args: tuple[object, ...]) -> str:
    def one(a: object) -> str:
        if isinstance(a, Tensor):
            return str(tuple(a.shape))
        if a is None or isinstance(a, (bool, int, float, str)):
            return repr(a)
        return f"a {type(a).__name__}"
    return ", ".join(one(a) for a in args)


def loss_ends(losses: list[float]) -> tuple[float, float]:
    """The mean loss over the first and over the last steps of a run (a fifth of it, at most 50
    steps each), steadier than two single steps."""
    window = max(1, min(50, len(losses) // 5))
    return sum(losses[:window]) / window, sum(losses[-window:]) / window
