"""The exercise notebook docs/lessons/exercise-transformer.ipynb: what it alone shows and checks.

The contract every exercise notebook keeps (published clean, the solved notebook runs and passes
every checker, a listed mistake stops at its checker: the table in tests/exercise_notebooks.py)
is tested in tests/test_exercise_notebooks.py. Here: the solved notebook shows the leak (lower
training loss, worse ciphertexts without the mask), its figure's key, and the checkers' messages,
tested directly.
"""
from __future__ import annotations

import math
import re

import nbformat
import notebook_cells
import pytest
import torch
from exercise_checkers import assert_names_the_mistake, mistakes
from exercise_notebooks import EXERCISES, solved_run
from notebook_cells import tagged, text

from lessonlib.exercises import transformer as exercise

EXERCISE = EXERCISES["transformer"]


def namespace(nb: nbformat.NotebookNode) -> exercise.Parts:
    """The four functions of a notebook's exercise cells, without running the notebook."""
    ns: dict = {"torch": torch}
    for tag in EXERCISE.parts:
        exec(tagged(nb, tag).source, ns)
    return exercise.Parts(ns["causal_mask"], ns["masked_attention"], ns["split_heads"], ns["merge_heads"])


# ----------------------------------------------------------------------------- the notebook as published

def test_solution_shows_the_leak(exercise_memo, tmp_path_factory):
    nb = solved_run(EXERCISE, tmp_path_factory)
    report = "".join(text(c) for c in nb.cells)
    rows = {m.group(1): (float(m.group(2)), int(m.group(3))) for m in re.finditer(
        r"(with(?:out)? the mask): training loss ([\d.]+), .*?ciphertexts written right (\d+)%", report)}
    assert set(rows) == {"with the mask", "without the mask"}, report
    (loss_with, right_with), (loss_without, right_without) = rows["with the mask"], rows["without the mask"]
    assert loss_without < loss_with / 3, f"without the mask the training loss is lower:\n{report}"
    assert right_with >= 95 and right_without <= 5, f"but only the masked model writes ciphertexts:\n{report}"


def test_head_map_sequence_has_the_key_the_text_names():
    """The heads' figure needs a key other than 0, or the ciphertext equals the plaintext and no
    shift shows; the text before it names the key."""
    nb = notebook_cells.load(EXERCISE.path)
    (cell,) = [c for c in nb.cells if c.cell_type == "code" and "sample = caesar.held_out(" in c.source]
    line = next(l for l in cell.source.splitlines() if l.startswith("sample = "))
    sample = eval(line.split("=", 1)[1].split("#")[0], {"caesar": exercise.caesar})
    key = sample[0, 0].item()
    n = exercise.caesar.PROTOCOL.digits
    assert key != 0 and (sample[0, n + 2:] != sample[0, 1:n + 1]).all()
    before = nb.cells[nb.cells.index(cell) - 1].source
    assert f"The sequence's key is {key}," in before and f"plus {key} (mod 10)" in before


# ----------------------------------------------------------------------------- the checker

def mask_tril(offset: int):
    return lambda L: torch.ones(L, L, dtype=torch.bool).tril(offset)


def stub(*_):
    raise NotImplementedError


def attention(post_softmax=False, fill=float("-inf"), scale=True, own_mask=False, ignore=False, detach=False):
    def attend(q, k, v, mask):
        scores = q @ k.transpose(-2, -1) / (q.shape[-1] ** 0.5 if scale else 1)
        if own_mask:
            mask = torch.ones(q.shape[-2], q.shape[-2], dtype=torch.bool).tril()
        if post_softmax:
            weights = scores.softmax(-1) * mask
        else:
            weights = (scores if ignore else scores.masked_fill(~mask, fill)).softmax(-1)
        out = weights @ v
        return (out.detach(), weights) if detach else (out, weights)
    return attend


def split(x, heads):
    B, L, d = x.shape
    return x.view(B, L, heads, d // heads).transpose(1, 2)


def merge(x):
    B, h, L, dh = x.shape
    return x.transpose(1, 2).reshape(B, L, h * dh)


MASK_MISTAKES = {
    "stub": (stub, "still the stub"),
    "hides the diagonal": (mask_tril(-1), "hides the diagonal"),
    "inverted": (lambda L: ~torch.ones(L, L, dtype=torch.bool).tril(), "inverted"),
    "transposed": (lambda L: torch.ones(L, L, dtype=torch.bool).triu(), "transposed"),
    "float": (lambda L: torch.ones(L, L).tril(), "boolean"),
    "wrong shape": (lambda L: torch.ones(L, dtype=torch.bool), "shape"),
}
ATTENTION_MISTAKES = {
    "stub": (stub, "still the stub"),
    "mask after the softmax": (attention(post_softmax=True), "after the softmax"),
    "mask ignored": (attention(ignore=True), "ignored"),
    "filled with 0": (attention(fill=0.0), "exp(0) = 1"),
    "no scaling": (attention(scale=False), "missing scaling"),
    "its own causal mask": (attention(own_mask=True), "instead of using the `mask` argument"),
    "mask inverted in use": (lambda q, k, v, m: attention()(q, k, v, ~m), "NaN"),
    "detached": (attention(detach=True), "no gradient"),
}
HEADS_MISTAKES = {
    "stub": ((stub, merge), "still the stub"),
    "transposed merge": ((split, lambda x: x.permute(0, 2, 3, 1).reshape(x.shape[0], x.shape[2], -1)),
                         "merge_heads is transposed"),
    "merge without transpose": ((split, lambda x: x.reshape(x.shape[0], x.shape[2], -1)), "mixes positions"),
    "split without transpose": ((lambda x, h: x.view(*x.shape[:2], h, -1), merge), "transpose(1, 2)"),
    "split dealt like cards": ((lambda x, h: x.view(*x.shape[:2], -1, h).permute(0, 3, 1, 2), merge),
                               "like cards"),
    "split across positions": ((lambda x, h: x.reshape(x.shape[0], h, x.shape[1], -1), merge),
                               "cuts across positions"),
}


@pytest.mark.parametrize("diagnose, wrong, expected", mistakes(
    causal_mask=(exercise.diagnose_mask, MASK_MISTAKES),
    masked_attention=(exercise.diagnose_attention, ATTENTION_MISTAKES),
    heads=(lambda pair: exercise.diagnose_heads(*pair), HEADS_MISTAKES)))
def test_each_checker_names_each_listed_mistake(diagnose, wrong, expected):
    assert_names_the_mistake(diagnose, wrong, expected)


def test_checkers_accept_the_reference_and_the_published_solutions(capsys):
    for parts in (exercise.REFERENCE, namespace(EXERCISE.solved())):
        assert exercise.diagnose_mask(parts.causal_mask) is None
        assert exercise.diagnose_attention(parts.masked_attention) is None
        assert exercise.diagnose_heads(parts.split_heads, parts.merge_heads) is None
        assert exercise.diagnose_assembled(parts) is None
    exercise.check_assembled(exercise.REFERENCE)
    assert capsys.readouterr().out.startswith("✓")


def test_assembled_check_reports_the_first_wrong_part():
    parts = exercise.REFERENCE._replace(causal_mask=mask_tril(-1))
    assert "hides the diagonal" in exercise.diagnose_assembled(parts)


def test_check_raises_with_plain_message():
    with pytest.raises(exercise.AttentionCheckError, match="hides the diagonal"):
        exercise.check_mask(mask_tril(-1))


def test_train_uses_the_readers_functions(no_memo):
    calls = []

    def spy(q, k, v, mask):
        calls.append(mask.clone())
        return exercise.REFERENCE.masked_attention(q, k, v, mask)

    run = exercise.train(exercise.REFERENCE._replace(masked_attention=spy), causal=False, steps=2)
    assert calls and all(m.all() for m in calls), "without the mask every position sees every other"
    calls.clear()
    exercise.train(exercise.REFERENCE._replace(masked_attention=spy), causal=True, steps=2)
    assert calls and torch.equal(calls[0], exercise.REFERENCE.causal_mask(calls[0].shape[-1]))
    assert len(run.losses) == 2


# ----------------------------------------------------------------------------- the outcome

def losses_from(first, last, steps=600):
    return [first + (last - first) * i / (steps - 1) for i in range(steps)]


PLATEAU = exercise.PLATEAU_LOSS


@pytest.mark.parametrize("losses, exact, expected", [
    (losses_from(PLATEAU, PLATEAU, 300), 0.0, "still learning: after 300 steps the loss is 2.167, on the plateau"),
    (losses_from(PLATEAU, PLATEAU, exercise.OUTCOME.steps), 0.0, "still learning"),
    (losses_from(PLATEAU, 1.25), 0.10, "still learning: 10% of the ciphertexts written right after 600 steps"),
    (losses_from(PLATEAU, 1.25), 0.10, "Run 600 more steps: exercise.train(parts, causal=True, steps=1200)"),
    (losses_from(PLATEAU, PLATEAU, exercise.OUTCOME.enough), 0.0, "this will not learn: after"),
    (losses_from(PLATEAU, 0.05), 0.0, "reads the token it must predict"),
    (losses_from(PLATEAU, math.nan), 0.0, "NaN"),
])
def test_the_outcome_checker_tells_still_learning_from_will_not_learn(losses, exact, expected):
    result = exercise.Result(exact, losses)
    problem = exercise.diagnose_learned(result)
    assert problem is not None and expected in problem, problem
    with pytest.raises(exercise.AttentionCheckError):
        exercise.check_learned(result)


def test_a_run_on_the_plateau_is_told_how_long_to_train():
    problem = exercise.diagnose_learned(exercise.Result(0.0, losses_from(PLATEAU, PLATEAU, 300)))
    enough = exercise.OUTCOME.enough
    assert f"Run {enough - 300} more steps: exercise.train(parts, causal=True, steps={enough})" in problem


def test_the_outcome_checker_passes_at_the_bound(capsys):
    exercise.check_learned(exercise.Result(exercise.OUTCOME.bound, losses_from(PLATEAU, 1.09)))
    assert capsys.readouterr().out.startswith("✓")
