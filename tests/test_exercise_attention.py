"""The exercise notebook docs/lessons/exercise-attention.ipynb: what it alone shows and checks.

The contract every exercise notebook keeps (published clean, the solved notebook runs and passes
every checker, a listed mistake stops at its checker: the table in tests/exercise_notebooks.py)
is tested in tests/test_exercise_notebooks.py. Here: the solved notebook shows the accuracy gain
and question 3's answer, and the checker's messages for common mistakes are tested directly (part
two's, the padding mask's, in tests/test_exercise_padding.py).
"""
from __future__ import annotations

import math
import re
from types import SimpleNamespace

import notebook_cells
import pytest
import torch
from exercise_checkers import assert_accepts, assert_names_the_mistake, mistakes
from exercise_notebooks import EXERCISES, solved_run
from notebook_cells import solution_code, tagged, text

from lessonlib.exercises import attention as exercise

EXERCISE = EXERCISES["attention"]


# ----------------------------------------------------------------------------- the solved notebook

def test_solution_passes_and_attention_wins(exercise_memo, tmp_path_factory):
    nb = solved_run(EXERCISE, tmp_path_factory)
    assert "✓ attend() matches the reference" in text(tagged(nb, "check"))
    report = "".join(text(c) for c in nb.cells)
    gain = re.search(r"at length (\d+) your attention adds ([+-]\d+)% exact-match accuracy", report)
    assert gain, report
    assert int(gain.group(2)) >= 20, f"attention should clearly win at the longest length:\n{report}"
    assert "✓ attend() with a mask matches the reference" in text(tagged(nb, "check-mask"))
    assert report.count("✓ expected:") == 4, report  # the solution meets every expectation
    # question 3's answer: without the mask, far more of the long strings' answers change
    changed = {int(n): int(c) for n, c in
               re.findall(r"^\s*(\d+)\s+\d+%\s+\d+%\s+\d+%\s+(\d+)%\s*$", report, re.M)}
    assert len(changed) == 5, report
    assert changed[max(changed)] >= changed[min(changed)] + 20, changed


# ----------------------------------------------------------------------------- the checker

def reference(q, k):
    H = q.shape[-1]
    w = (q @ k.transpose(-2, -1) / math.sqrt(H)).softmax(-1)
    return w @ k, w


def solution(q, k):
    namespace: dict = {}
    exec(solution_code(notebook_cells.load(EXERCISE.path)), namespace)
    return namespace["attend"](q, k)


def _weights(q, k, divide=None, dim=-1):
    s = q @ k.transpose(-2, -1)
    return (s if divide is None else s / divide).softmax(dim)


WRONG = {
    "stub": (lambda q, k: (_ for _ in ()).throw(NotImplementedError()), "still the stub"),
    "softmax over decoder steps": (lambda q, k: (_weights(q, k, math.sqrt(q.shape[-1]), 1) @ k,
                                                 _weights(q, k, math.sqrt(q.shape[-1]), 1)),
                                   "softmax with dim=-1"),
    "softmax over the batch": (lambda q, k: (_weights(q, k, math.sqrt(q.shape[-1]), 0) @ k,
                                             _weights(q, k, math.sqrt(q.shape[-1]), 0)),
                               "across the batch"),
    "no scaling": (lambda q, k: (_weights(q, k) @ k, _weights(q, k)), "missing scaling"),
    "divided by H": (lambda q, k: (_weights(q, k, q.shape[-1]) @ k, _weights(q, k, q.shape[-1])),
                     "divided the scores by H"),
    "no softmax": (lambda q, k: ((q @ k.transpose(-2, -1)) @ k, q @ k.transpose(-2, -1)),
                   "not a probability distribution"),
    "transposed weights": (lambda q, k: (reference(q, k)[0], reference(q, k)[1].transpose(-2, -1)),
                           "transposed"),
    "swapped results": (lambda q, k: reference(q, k)[::-1], "swapped"),
    "one result": (lambda q, k: reference(q, k)[0], "must return two tensors"),
    "context not weighted sum": (lambda q, k: (k[:, : q.shape[1]] * 0 + q, reference(q, k)[1]),
                                 "context is not weights @ encoder_outputs"),
    "squeezed": (lambda q, k: tuple(t.squeeze() for t in reference(q, k)), "T_out = 1"),
    "detached": (lambda q, k: tuple(t.detach() for t in reference(q, k)), "carries no gradient"),
    "crashes": (lambda q, k: reference(q, k.mT), "raised RuntimeError"),
}


@pytest.mark.parametrize("diagnose, wrong, expected", mistakes(
    attend=(exercise.diagnose, WRONG)))
def test_each_checker_names_each_listed_mistake(diagnose, wrong, expected):
    assert_names_the_mistake(diagnose, wrong, expected)


@pytest.mark.parametrize("attend", [reference, solution], ids=["reference", "published solution"])
def test_checker_accepts_correct_answers(attend, capsys):
    assert_accepts(exercise.diagnose, exercise.check, attend, capsys)


def test_check_raises_with_plain_message():
    with pytest.raises(exercise.AttentionCheckError, match="missing scaling"):
        exercise.check(WRONG["no scaling"][0])
    assert exercise.AttentionCheckError("x")._render_traceback_() == ["✗ x"]


def test_train_uses_the_readers_function(no_memo):
    calls = []

    def spy(q, k):
        calls.append(q.shape)
        return reference(q, k)

    model = exercise.train(spy, steps=2)
    assert calls and model.decoder.attend is spy
    assert len(model.losses) == 2 and all(math.isfinite(loss) for loss in model.losses)
    src, _ = exercise.seq2seq.make_batch(5, 2, torch.Generator().manual_seed(0))
    tokens, weights = model.greedy_decode(src, max_len=6)
    assert weights.shape == (2, 6, 5)


# ----------------------------------------------------------------------------- the outcome

def losses_from(first, last, steps=exercise.OUTCOME.steps):
    return [first + (last - first) * i / (steps - 1) for i in range(steps)]


def at_longest(accuracy):
    return {4: 1.0, exercise.OUTCOME.length: accuracy}


START = 2.6  # about ln 13, a uniform guess among the tokens
BUDGET = exercise.OUTCOME.steps


@pytest.mark.parametrize("losses, accuracy, expected", [
    (losses_from(START, 0.3, 200), 0.05, "still learning: 5% right at length 12 after 200 steps"),
    (losses_from(START, 0.3, 200), 0.05, f"Run {BUDGET - 200} more steps: exercise.train(attend, steps={BUDGET})"),
    (losses_from(START, 0.2), (exercise.OUTCOME.without + exercise.OUTCOME.bound) / 2, "still learning"),
    (losses_from(START, 0.2), exercise.OUTCOME.without, "this will not learn to use attention"),
    (losses_from(START, START), 0.0, "this will not learn: after"),
    (losses_from(START, math.nan), 0.0, "NaN"),
])
def test_the_outcome_checker_tells_still_learning_from_will_not_learn(losses, accuracy, expected):
    result = exercise.Result(at_longest(accuracy), losses)
    problem = exercise.diagnose_learned(result)
    assert problem is not None and expected in problem, problem
    with pytest.raises(exercise.AttentionCheckError):
        exercise.check_learned(SimpleNamespace(losses=losses), at_longest(accuracy))


def test_the_outcome_checker_passes_at_the_bound(capsys):
    exercise.check_learned(SimpleNamespace(losses=losses_from(START, 0.1)), at_longest(exercise.OUTCOME.bound))
    assert capsys.readouterr().out.startswith("✓")
