"""The exercise notebook docs/lessons/exercise-scan.ipynb: what it alone shows and checks.

The contract every exercise notebook keeps (published clean, the solved notebook runs and passes
every checker, a listed mistake stops at its checker: the table in tests/exercise_notebooks.py)
is tested in tests/test_exercise_notebooks.py. Here: the solved notebook prints the counts its
text describes, and the checkers' messages are tested directly, one per mistake the notebook's
checker names.
"""
from __future__ import annotations

import math

import nbformat
import pytest
import torch
from exercise_checkers import assert_names_the_mistake, mistakes
from exercise_notebooks import EXERCISES, solved_run
from notebook_cells import tagged, text

from lessonlib.exercises import scan as exercise
from lessonlib.experiments import cost
from lessonlib.models.scan import scan_cumprod, scan_loop, scan_parallel

EXERCISE = EXERCISES["scan"]


def namespace(nb: nbformat.NotebookNode) -> dict:
    """The reader's functions of a notebook's exercise cells, without running the notebook."""
    ns: dict = {"torch": torch}
    for tag in EXERCISE.parts:
        exec(tagged(nb, tag).source, ns)
    return ns


# ----------------------------------------------------------------------------- the notebook as published

def test_solution_counts_what_the_text_says(exercise_memo, tmp_path_factory):
    nb = solved_run(EXERCISE, tmp_path_factory)
    table = "".join(text(c) for c in nb.cells if "exercise.counts(scan_loop, T)" in c.source)
    rows = [[int(n.replace(",", "")) for n in line.split()] for line in table.splitlines()[1:]]
    assert [r[0] for r in rows] == [64, 256, 1024, 4096], table
    # "the loop takes four times as many steps, and the solution's scan takes four more: two rounds of two steps"
    assert all(later[1] == 4 * earlier[1] and later[2] == earlier[2] + 4 for earlier, later in zip(rows, rows[1:])), table
    # "about 3T (log2 T - 1) numbers where the loop computes 2T", counted by cost.count as the lesson counts
    a, b, h0 = (t[:1, :, :1] if t.dim() == 3 else t[:1, :1] for t in exercise._inputs(rows[0][0]))
    assert rows[0][4] == cost.count(lambda: scan_parallel(a, b, h0)).operations, table
    assert all(r[3] == 2 * r[0] for r in rows), table
    assert all(1 < r[4] / (3 * r[0] * (math.log2(r[0]) - 1)) < 1.01 for r in rows), table
    claim = next(c.source for c in nb.cells if "four more" in c.source and c.cell_type == "markdown")
    assert "four times as many steps" in claim and "two rounds of two steps" in claim and "3T (log2 T - 1)" in claim


# ----------------------------------------------------------------------------- the checker

def combine(earlier, later):
    (A1, B1), (A2, B2) = earlier, later
    return A2 * A1, A2 * B1 + B2


def hillis_steele(fold="through a_1", order="earlier first", rounds=math.ceil, in_round="old A", shift=False):
    """A reader's scan, right by default, with one mistake chosen by the arguments."""
    def scan(a, b, h0):
        first = {"through a_1": a[:, :1] * h0.unsqueeze(1) + b[:, :1], "forgotten": b[:, :1],
                 "added": b[:, :1] + h0.unsqueeze(1)}[fold]
        A, B = a.clone(), torch.cat([first, b[:, 1:]], dim=1)
        T = a.shape[1]
        for r in range(rounds(math.log2(T)) if T > 1 else 0):
            d = 2 ** r
            earlier, later = (A[:, :-d], B[:, :-d]), (A[:, d:], B[:, d:])
            A_new, B_new = combine(earlier, later) if order == "earlier first" else combine(later, earlier)
            if in_round == "new A":  # the in-place version: B reads the A this round just wrote
                A[:, d:] = A_new
                B[:, d:] = A[:, d:] * B[:, :-d] + B[:, d:]
            else:
                A, B = torch.cat([A[:, :d], A_new], dim=1), torch.cat([B[:, :d], B_new], dim=1)
        return torch.cat([h0.unsqueeze(1), B[:, :-1]], dim=1) if shift else B
    return scan


def in_place(a, b, h0):
    a[:, 0] *= 1.0  # touches the caller's tensor, even if it changes no value
    a.add_(0.0)
    b[:, :1] = a[:, :1] * h0.unsqueeze(1) + b[:, :1]
    return scan_loop(a, torch.cat([b[:, :1] - a[:, :1] * h0.unsqueeze(1), b[:, 1:]], dim=1), h0)


def stub(*_):
    raise NotImplementedError


COMBINE_MISTAKES = {
    "stub": (stub, "still the stub"),
    "wrong order": (lambda e, l: combine(l, e), "wrong order"),
    "later A dropped": (lambda e, l: (l[0] * e[0], e[1] + l[1]), "drops the later step's A"),
    "A added": (lambda e, l: (l[0] + e[0], l[0] * e[1] + l[1]), "the decays multiply"),
    "one tensor": (lambda e, l: l[0] * e[0], "pair of tensors"),
}
SCAN_MISTAKES = {
    "stub": (stub, "still the stub"),
    "pairs in the wrong order": (hillis_steele(order="later first"), "combines each pair in the wrong order"),
    "off-by-one shift": (hillis_steele(shift=True), "shifted by one step"),
    "h0 forgotten": (hillis_steele(fold="forgotten"), "h0 is ignored"),
    "h0 not through a_1": (hillis_steele(fold="added"), "without passing through a_1"),
    "a round short": (hillis_steele(rounds=math.floor), "one round short"),
    "B reads the new A": (hillis_steele(in_round="new A"), "already updated"),
    "a product that underflows": (scan_cumprod, "underflowed to 0"),
    "a loop": (scan_loop, "steps through the positions one at a time"),
    "inputs changed in place": (in_place, "in place"),
    "h0 returned too": (lambda a, b, h0: torch.cat([h0.unsqueeze(1), scan_loop(a, b, h0)], dim=1), "h0 included"),
    "logarithms of b": (lambda a, b, h0: scan_loop(a, b.log().exp(), h0), "inf or nan for ordinary inputs"),
}


@pytest.mark.parametrize("diagnose, wrong, expected", mistakes(
    combine=(exercise.diagnose_combine, COMBINE_MISTAKES),
    scan=(exercise.diagnose_scan, SCAN_MISTAKES)))
def test_each_checker_names_each_listed_mistake(diagnose, wrong, expected):
    assert_names_the_mistake(diagnose, wrong, expected)


def test_checkers_accept_the_reference_and_the_published_solutions(capsys):
    ns = namespace(EXERCISE.solved())
    assert exercise.diagnose_combine(combine) is None and exercise.diagnose_combine(ns["combine"]) is None
    for scan in (hillis_steele(), scan_parallel, ns["scan"]):
        assert exercise.diagnose_scan(scan) is None
        assert exercise.diagnose_min_gru(scan) is None
    exercise.check_scan(scan_parallel)
    assert capsys.readouterr().out.startswith("✓")


def test_the_min_gru_check_wants_a_gradient():
    problem = exercise.diagnose_min_gru(lambda a, b, h0: scan_parallel(a, b, h0).detach())
    assert "no gradient" in problem


def test_counts_are_cost_count():
    """counts() is the course's cost.count: the loop waits 2 steps per position, Hillis-Steele 2 per
    round after folding h0, and Blelloch's scan does less than 3 times the loop's work."""
    for T in (1, 5, 64, 300):
        assert exercise.counts(scan_loop, T) == cost.Cost(2 * T, 2 * T)
        assert exercise.counts(scan_parallel, T).sequential_steps == 2 + 2 * math.ceil(math.log2(T))
        assert exercise.counts(exercise.hillis_steele, T) == exercise.counts(scan_parallel, T)
        assert exercise.counts(exercise.blelloch, T).operations < 3 * 2 * T


@pytest.mark.parametrize("T", [1, 2, 3, 4, 5, 7, 8, 9, 31, 32, 33, 100, 1025])
def test_blelloch_equals_the_loop(T):
    a, b, h0 = exercise._inputs(T)
    assert torch.allclose(exercise.blelloch(a, b, h0), scan_loop(a, b, h0), rtol=1e-9, atol=1e-12)


def test_the_checker_accepts_blelloch():
    assert exercise.diagnose_scan(exercise.blelloch) is None


def test_check_raises_with_plain_message():
    with pytest.raises(exercise.ScanCheckError, match="wrong order"):
        exercise.check_combine(lambda e, l: combine(l, e))
