"""Part two of the exercise notebook: the padding mask, its checker and the notebook cells.

The checker must accept every correct masked attention and name each classic slip; the notebook,
given a mask applied after the softmax, must stop at its checker cell with that reason.
"""
from __future__ import annotations

import math
import re
from pathlib import Path

import nbformat
import notebook_cells
import pytest
from nbclient.exceptions import CellExecutionError
from notebook_cells import solution_code, tagged

from lessonlib.exercises import attention as exercise
from lessonlib.models.attention import dot_product_attention

NOTEBOOK = Path(__file__).resolve().parents[1] / "docs" / "lessons" / "exercise-attention.ipynb"


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


@pytest.mark.parametrize("name", WRONG)
def test_mask_checker_names_the_mistake(name):
    wrong, expected = WRONG[name]
    problem = exercise.diagnose_mask(wrong)
    assert problem is not None and expected in problem, problem


@pytest.mark.parametrize("attend", [reference, solution, renormalised_after_softmax, large_negative],
                         ids=["reference", "published solution", "renormalised after softmax", "-1e9"])
def test_mask_checker_accepts_correct_answers(attend, capsys):
    assert exercise.diagnose_mask(attend) is None
    exercise.check_mask(attend)
    assert "✓" in capsys.readouterr().out


def test_check_mask_raises_with_plain_message():
    with pytest.raises(exercise.AttentionCheckError, match="after the softmax"):
        exercise.check_mask(after_softmax)


def test_notebook_stops_at_the_mask_checker_with_the_reason():
    # the part-two cells alone (set-up, the reader's attend, its checker): no training needed
    nb = notebook_cells.load(NOTEBOOK)
    setup = next(c for c in nb.cells if c.cell_type == "code")
    wrong = tagged(nb, "exercise-mask")
    wrong.source = (
        "def attend(decoder_states, encoder_outputs, mask=None):\n"
        "    H = decoder_states.shape[-1]\n"
        "    scores = decoder_states @ encoder_outputs.transpose(-2, -1) / H**0.5\n"
        "    weights = scores.softmax(dim=-1)\n"
        "    if mask is not None:\n"
        "        weights = weights * mask[:, None, :]  # the slip: masked after the softmax\n"
        "    return weights @ encoder_outputs, weights\n")
    nb.cells = [setup, wrong, tagged(nb, "check-mask")]
    with pytest.raises(CellExecutionError) as info:
        notebook_cells.execute(nb, NOTEBOOK.parent)
    assert info.value.ename == "AttentionCheckError"
    assert "after the softmax" in str(info.value)


def test_unsolved_part_two_stops_at_its_checker():
    nb = notebook_cells.load(NOTEBOOK)
    setup = next(c for c in nb.cells if c.cell_type == "code")
    nb.cells = [setup, tagged(nb, "exercise-mask"), tagged(nb, "check-mask")]
    with pytest.raises(CellExecutionError) as info:
        notebook_cells.execute(nb, NOTEBOOK.parent)
    assert "still the stub" in str(info.value)


def test_published_training_budget_is_what_the_notebook_prints():
    nb = notebook_cells.load(NOTEBOOK)
    text = "".join(c.source for c in nb.cells)
    assert "exercise.describe_training()" in text
    # no configuration number typed in the notebook's prose: the code states or prints it
    prose = "".join(c.source for c in nb.cells if c.cell_type == "markdown")
    for value in exercise.TRAINING.values():
        assert not re.search(rf"(?<![\w.`]){re.escape(str(value))} (steps|digits)", prose), value
    assert "minute" not in prose
