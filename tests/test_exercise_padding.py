"""Part two of the attention exercise notebook: the padding mask and its checker.

The checker must accept every correct masked attention and name each classic slip. That the
notebook, given a mask applied after the softmax (or part two's stub), stops at its checker cell
with that reason is the contract of every exercise notebook: tests/test_exercise_notebooks.py.
"""
from __future__ import annotations

import math
import re

import nbformat
import notebook_cells
import pytest
from exercise_checkers import assert_accepts, assert_names_the_mistake, mistakes
from exercise_notebooks import EXERCISES
from notebook_cells import solution_code

from lessonlib.exercises import attention as exercise
from lessonlib.models.attention import dot_product_attention

NOTEBOOK = EXERCISES["attention"].path


def part_two_solution(nb: nbformat.NotebookNode) -> str:
    return solution_code(nb, "Solution, part 2")


def _scores(q, k):
    return q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])


def _out(w, k):
    return w @ k, w


def reference(q, k, mask=None):
    return dot_product_attention(q, k, k, mask=None if mask is None else mask[:, None, :])


def solution(q, k, mask=None):
    namespace: dict = {}
    exec(part_two_solution(notebook_cells.load(NOTEBOOK)), namespace)
    return namespace["attend"](q, k, mask)


def renormalised_after_softmax(q, k, mask=None):  # the long way round, but right
    w = _scores(q, k).softmax(-1)
    if mask is not None:
        w = w * mask[:, None, :]
        w = w / w.sum(-1, keepdim=True)
    return _out(w, k)


def large_negative(q, k, mask=None):  # -1e9 underflows to a weight of exactly 0 in float32
    s = _scores(q, k)
    return _out((s if mask is None else s.masked_fill(~mask[:, None, :], -1e9)).softmax(-1), k)


def _masked(fill, where=lambda mask: ~mask[:, None, :]):
    def attend(q, k, mask=None):
        s = _scores(q, k)
        return _out((s if mask is None else s.masked_fill(where(mask), fill)).softmax(-1), k)
    return attend


def after_softmax(q, k, mask=None):
    w = _scores(q, k).softmax(-1)
    return _out(w if mask is None else w * mask[:, None, :], k)


WRONG = {
    "stub": (lambda q, k, mask=None: (_ for _ in ()).throw(NotImplementedError()), "still the stub"),
    "mask ignored": (lambda q, k, mask=None: reference(q, k), "the mask is ignored"),
    "mask after the softmax": (after_softmax, "after the softmax"),
    "filled with 0": (_masked(0.0), "a score of 0 does not hide"),
    "inverted": (_masked(float("-inf"), where=lambda mask: mask[:, None, :]), "real tokens"),
    "no mask parameter": (lambda q, k: reference(q, k), "takes no mask yet"),
    "fails without a mask": (lambda q, k, mask=None: reference(q, k, mask.bool()), "called without a mask"),
    "mask along the wrong axis": (_masked(float("-inf"), where=lambda mask: ~mask[:, :, None]),
                                  "mask[:, None, :]"),
    "part one's mistake": (lambda q, k, mask=None: _out(_scores(q, k).softmax(1), k), "softmax with dim=-1"),
}


@pytest.mark.parametrize("diagnose, wrong, expected", mistakes(
    attend_with_mask=(exercise.diagnose_mask, WRONG)))
def test_each_checker_names_each_listed_mistake(diagnose, wrong, expected):
    assert_names_the_mistake(diagnose, wrong, expected)


@pytest.mark.parametrize("attend", [reference, solution, renormalised_after_softmax, large_negative],
                         ids=["reference", "published solution", "renormalised after softmax", "-1e9"])
def test_mask_checker_accepts_correct_answers(attend, capsys):
    assert_accepts(exercise.diagnose_mask, exercise.check_mask, attend, capsys)


def test_check_mask_raises_with_plain_message():
    with pytest.raises(exercise.AttentionCheckError, match="after the softmax"):
        exercise.check_mask(after_softmax)


def test_published_training_budget_is_what_the_notebook_prints():
    nb = notebook_cells.load(NOTEBOOK)
    text = "".join(c.source for c in nb.cells)
    assert "exercise.describe_training()" in text
    # no configuration number typed in the notebook's prose: the code states or prints it
    prose = "".join(c.source for c in nb.cells if c.cell_type == "markdown")
    for value in exercise.TRAINING.values():
        assert not re.search(rf"(?<![\w.`]){re.escape(str(value))} (steps|digits)", prose), value
    assert "minute" not in prose
