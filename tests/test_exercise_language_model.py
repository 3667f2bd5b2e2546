"""The exercise notebook docs/lessons/exercise-language-model.ipynb: what it alone shows and checks.

The contract every exercise notebook keeps (published clean, the solved notebook runs and passes
every checker, a listed mistake stops at its checker: the table in tests/exercise_notebooks.py)
is tested in tests/test_exercise_notebooks.py. Here: in the solved notebook the loss falls and the
samples behave as the text says (greedy repeats itself, top-k keeps to likely characters), and
the checkers' messages, tested directly.
"""
from __future__ import annotations

import math
import re

import pytest
import torch
from exercise_checkers import assert_names_the_mistake, mistakes
from exercise_notebooks import EXERCISES, solved_run
from notebook_cells import tagged, text
from torch.nn import functional as F

from lessonlib.exercises import language_model as exercise
from lessonlib.experiments import language_model as lm

EXERCISE = EXERCISES["language-model"]


def solution_functions() -> dict:
    ns: dict = {"torch": torch, "F": F}
    nb = EXERCISE.solved()
    for tag in EXERCISE.parts:
        exec(tagged(nb, tag).source, ns)
    return ns


# ----------------------------------------------------------------------------- the notebook as published

def test_solution_learns_and_writes(exercise_memo, tmp_path_factory):
    nb = solved_run(EXERCISE, tmp_path_factory)
    report = "".join(text(c) for c in nb.cells)
    losses = [float(b) for b in re.findall(r"step +\d+: ([\d.]+) bits per character", report)]
    assert len(losses) == 4 and losses[-1] < losses[0] - 2, report
    samples = dict(re.findall(r"--- temperature ([\d.]+(?:, top 5)?)\n(.*?)(?=\n---|\Z)", report, re.S))
    assert set(samples) >= {"0", "0.5", "1.0", "1.5", "1.5, top 5"}, report
    greedy = samples["0"][len("Ham.\n"):]
    assert len(set(greedy[-60:])) < len(set(samples["1.5"][-60:])), "greedy text uses fewer characters"
    assert samples["0"].startswith("Ham.\n")


# ----------------------------------------------------------------------------- the checker: sampling

def sampler(multiply=False, ignore_t=False, smallest=False, fill=float("-inf"), strict=False, greedy_always=False,
            uniform=False, no_generator=False, flat=False, no_zero=False):
    def sample(logits, temperature=1.0, top_k=None, generator=None):
        if greedy_always or (temperature == 0 and not no_zero):
            return logits.argmax(-1, keepdim=True)
        if not ignore_t:
            logits = logits * temperature if multiply else logits / temperature
        if top_k is not None:
            if smallest:
                kth = (-logits).topk(top_k, dim=-1).values[:, -1:]
                logits = logits.masked_fill(-logits < kth, fill)
            else:
                kth = logits.topk(top_k, dim=-1).values[:, -1:]
                logits = logits.masked_fill(logits <= kth if strict else logits < kth, fill)
        probs = torch.ones_like(logits).softmax(-1) if uniform else logits.softmax(-1)
        out = torch.multinomial(probs, 1, generator=None if no_generator else generator)
        return out[:, 0] if flat else out
    return sample


def stub(*_):
    raise NotImplementedError


SAMPLE_MISTAKES = {
    "stub": (stub, "still the stub"),
    "temperature multiplies": (sampler(multiply=True), "works backwards"),
    "temperature ignored": (sampler(ignore_t=True), "temperature is ignored"),
    "top-k keeps the smallest": (sampler(smallest=True), "least"),
    "top-k filled with 0": (sampler(fill=0.0), "different tokens"),
    "top-k off by one": (sampler(strict=True), "off-by-one"),
    "always greedy": (sampler(greedy_always=True), "always returns the same token"),
    "uniform draws": (sampler(uniform=True), "uniform"),
    "generator ignored": (sampler(no_generator=True), "generator is ignored"),
    "shape (B,)": (sampler(flat=True), "(B, 1)"),
    "temperature 0 divides": (sampler(no_zero=True), "temperature 0"),
}


# ----------------------------------------------------------------------------- the checker: train_chunk

def chunk_step(detach=True, carry=True, zero_grad=True, step=True, item=True, total=False):
    def train_chunk(model, optimizer, x, y, state):
        logits, state = model(x, state if carry else None)
        loss = F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="sum" if total else "mean")
        if zero_grad:
            optimizer.zero_grad()
        loss.backward()
        if step:
            optimizer.step()
        if detach:
            state = tuple(s.detach() for s in state)
        return (loss.item() if item else loss), state
    return train_chunk


CHUNK_MISTAKES = {
    "stub": (stub, "still the stub"),
    "state not detached": (chunk_step(detach=False), "still attached"),
    "state not carried": (chunk_step(carry=False), "empty state"),
    "no zero_grad": (chunk_step(zero_grad=False), "pile up"),
    "no optimizer step": (chunk_step(step=False), "never changed"),
    "loss as a tensor": (chunk_step(item=False), "loss.item()"),
    "summed loss": (chunk_step(total=True), "mean over all"),
}


@pytest.mark.parametrize("diagnose, wrong, expected", mistakes(
    sample=(exercise.diagnose_sample, SAMPLE_MISTAKES),
    train_chunk=(exercise.diagnose_train_chunk, CHUNK_MISTAKES)))
def test_each_checker_names_each_listed_mistake(diagnose, wrong, expected):
    assert_names_the_mistake(diagnose, wrong, expected)


def test_the_backward_error_of_an_undetached_state_is_named():
    """A state returned attached, then detached by nobody: the second backward pass fails."""
    def leaky(model, optimizer, x, y, state):
        logits, new = model(x, state)
        loss = F.cross_entropy(logits.flatten(0, 1), y.flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        leaky.kept = new
        return loss.item(), tuple(s.detach() for s in new) if state is None else new
    problem = exercise.diagnose_train_chunk(leaky)
    assert problem is not None and ("not detached" in problem or "still attached" in problem), problem


def test_checkers_accept_the_reference_and_the_published_solutions(capsys):
    ns = solution_functions()
    assert exercise.diagnose_sample(exercise.REFERENCE_SAMPLE) is None
    assert exercise.diagnose_sample(ns["sample"]) is None
    reference_step = lambda m, o, x, y, s: lm.train_chunk(m, o, x, y, s, math.inf)
    assert exercise.diagnose_train_chunk(reference_step) is None
    assert exercise.diagnose_train_chunk(ns["train_chunk"]) is None
    exercise.check_sample(ns["sample"])
    assert capsys.readouterr().out.startswith("✓")
    with pytest.raises(exercise.LanguageModelCheckError, match="works backwards"):
        exercise.check_sample(sampler(multiply=True))


def test_train_and_write_use_the_readers_functions(no_memo):
    calls = []

    def spy(model, optimizer, x, y, state):
        calls.append(state is None)
        return lm.train_chunk(model, optimizer, x, y, state, math.inf)

    model, losses, tok = exercise.train(spy, steps=3)
    assert calls == [True, False, False] and len(losses) == 3, "the state is carried from the second chunk on"
    drawn = []

    def spy_sample(logits, temperature, top_k, generator):
        drawn.append((temperature, top_k))
        return exercise.REFERENCE_SAMPLE(logits, temperature, top_k, generator)

    out = exercise.write(model, tok, spy_sample, "HAM", 5, 0.7, top_k=3)
    assert out.startswith("HAM") and len(out) == 8 and drawn == [(0.7, 3)] * 5


# ----------------------------------------------------------------------------- the outcome

V = 73  # the lesson's characters: a uniform guess is log2(73) = 6.19 bits


def losses_in_bits(first, last, steps=300):
    return [(first + (last - first) * i / (steps - 1)) / exercise.BITS for i in range(steps)]


@pytest.mark.parametrize("losses, expected", [
    (losses_in_bits(6.2, 3.6), "and it is falling"),
    (losses_in_bits(6.2, 3.6, 150), "Run 150 more steps: exercise.train(train_chunk, steps=300)"),
    (losses_in_bits(6.2, 6.0, 100), "still learning: after 100 steps the loss is 6.05"),
    (losses_in_bits(6.2, 6.2), "this will not learn: after 300 steps the loss is still 6.20 bits"),
    (losses_in_bits(6.2, math.nan), "NaN"),
])
def test_the_outcome_checker_tells_still_learning_from_will_not_learn(losses, expected):
    problem = exercise.diagnose_learned(losses, V)
    assert problem is not None and expected in problem, problem
    with pytest.raises(exercise.LanguageModelCheckError):
        exercise.check_learned(losses, V)


def test_the_outcome_checker_passes_at_the_bound(capsys):
    exercise.check_learned([exercise.OUTCOME.bound / exercise.BITS] * 300, V)
    assert capsys.readouterr().out.startswith("✓")
    above = exercise.diagnose_learned([(exercise.OUTCOME.bound + 0.01) / exercise.BITS] * 300, V)
    assert above is not None and above.startswith("still learning"), above
