"""Each exercise's checkers must name each mistake its tests list: the mistakes and the messages
stay with each exercise's tests (tests/test_exercise_*.py), and the test they make is this one
shape, shared."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

Diagnose = Callable[[Any], "str | None"]  # a checker's diagnose_*: the reader's code -> what is wrong, or None


def mistakes(**checkers: tuple[Diagnose, dict[str, tuple[Any, str]]]) -> list:
    """One pytest param (diagnose, wrong, expected) per mistake of each checker, given as
    checker=(diagnose, {mistake: (the wrong code, what the message must say)}), with the id
    "checker: mistake"."""
    return [pytest.param(diagnose, wrong, expected, id=f"{checker}: {name}")
            for checker, (diagnose, table) in checkers.items() for name, (wrong, expected) in table.items()]


def assert_names_the_mistake(diagnose: Diagnose, wrong: Any, expected: str) -> None:
    problem = diagnose(wrong)
    assert problem is not None and expected in problem, problem


def assert_accepts(diagnose: Diagnose, check: Callable[[Any], None], correct: Any,
                   capsys: pytest.CaptureFixture[str]) -> None:
    """The checker finds nothing wrong with a correct answer, and its check says so with a ✓."""
    assert diagnose(correct) is None
    check(correct)
    assert "✓" in capsys.readouterr().out
