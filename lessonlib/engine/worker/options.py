"""Checks of the build's settings, wherever they come from (mkdocs.yml, LESSONLIB_*, a fence):
each bad value is one SetupError that names its source and says what it may be."""
from __future__ import annotations

import math
from collections.abc import Callable

from lessonlib.engine.worker.errors import SetupError


def whole_number(source: str, value: object) -> int:
    """A count of 0 or more, given as an int or as the text of one (an environment variable)."""
    text = str(value).strip()
    if isinstance(value, bool) or not text.isdigit():
        raise SetupError(f"{source}: {value!r} is not a whole number of 0 or more (0: one per core)")
    return int(text)


def switch(source: str, value: str) -> bool:
    if value not in ("0", "1"):
        raise SetupError(f"{source}: {value!r} must be 0 or 1 (or unset)")
    return value == "1"


def positive(source: str, value: object, unit: str) -> float:
    """A positive, finite number (seconds, kilobytes)."""
    return _number(source, value, f"a positive, finite number of {unit}", lambda n: n > 0)


def at_least_zero(source: str, value: object, unit: str) -> float:
    return _number(source, value, f"a finite number of {unit}, 0 or more", lambda n: n >= 0)


def _number(source: str, value: object, wanted: str, allowed: Callable[[float], bool]) -> float:
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        number = math.nan
    if isinstance(value, bool) or not math.isfinite(number) or not allowed(number):
        raise SetupError(f"{source}: {value!r} must be {wanted}")
    return number
