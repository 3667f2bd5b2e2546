"""The delta rule exercise's checkers (lessonlib.exercises.delta_rule): the reference passes, and
each usual mistake, written as a reader would write it, gets its own message."""
from __future__ import annotations

import pytest
import torch
from torch.nn import functional as F

from lessonlib.exercises import delta_rule as exercise


def reader_step(sign="-", beta_on="all", norm="each", reads="S^T k", outer="k delta", plus_S=True, in_place=None,
                beta_as_given=False):
    """A reader's delta_step, right by default, with one mistake chosen by the arguments."""
    def delta_step(S, k, v, beta):
        if in_place == "k":
            k /= k.norm(dim=-1, keepdim=True)
        unit = {"each": lambda: F.normalize(k, dim=-1), "none": lambda: k, "batch": lambda: k / k.norm(),
                "axis 0": lambda: F.normalize(k, dim=0), "write only": lambda: k}[norm]()
        key_read = F.normalize(k, dim=-1) if norm == "write only" else unit
        key_write = k if norm == "write only" else unit
        if reads == "S^T k":
            old = torch.einsum("bkv,bk->bv", S, key_read)
        else:  # S k, as a matrix times a vector
            old = (S @ key_read[:, :, None]).squeeze(-1)
        b = beta if beta_as_given else beta[:, None]
        delta = {"all": b * (v - old), "v": b * v - old, "old": v - b * old, "none": v - old}[beta_on] if sign == "-" \
            else {"+": b * (v + old), "backwards": b * (old - v), "none": b * v}[sign]
        write = key_write[:, :, None] * delta[:, None, :] if outer == "k delta" else delta[:, :, None] * key_write[:, None, :]
        if in_place == "S":
            S += write
            return S
        return S + write if plus_S else write
    return delta_step


def expanded(S, k, v, beta, eye_size=None, eye_dtype=None):
    """The same step in the form (I - beta k k^T) S + beta k v^T; eye_size and eye_dtype pick the identity's."""
    k = F.normalize(k, dim=-1)
    eye = torch.eye(eye_size(S) if eye_size else S.shape[1], dtype=eye_dtype or S.dtype)
    b = beta[:, None, None]
    return (eye - b * k[:, :, None] * k[:, None, :]) @ S + b * k[:, :, None] * v[:, None, :]


def in_float32(S, k, v, beta):
    """A step that works in float32 whatever it is given."""
    return reader_step()(S.float(), k.float(), v.float(), beta.float())


def stub(*_):
    raise NotImplementedError


STEP_MISTAKES = {
    "stub": (stub, "still the stub"),
    "sign of the correction": (reader_step(sign="+"), "the correction has the wrong sign"),
    "difference reversed": (reader_step(sign="backwards"), "the difference is the wrong way round"),
    "beta on v only": (reader_step(beta_on="v"), "beta multiplies v only"),
    "beta on S^T k only": (reader_step(beta_on="old"), "beta multiplies Sᵀk only"),
    "beta missing": (reader_step(beta_on="none"), "beta is missing"),
    "key not normalised": (reader_step(norm="none"), "k is not normalised"),
    "key normalised in the read only": (reader_step(norm="write only"), "normalised in one place only"),
    "key over the whole batch": (reader_step(norm="batch"), "length of the whole batch"),
    "key along the batch axis": (reader_step(norm="axis 0"), "along the batch axis"),
    "S k for S^T k": (reader_step(reads="S k"), "S k where it needs Sᵀk"),
    "outer product transposed": (reader_step(outer="delta k"), "the outer product is transposed"),
    "S taken as (d_v, d_k)": (reader_step(reads="S k", outer="delta k"), "treats S as (d_v, d_k)"),
    "additive write": (reader_step(sign="none"), "linear attention's write"),
    "a fade, not an edit": (lambda S, k, v, beta: (1 - beta[:, None, None]) * S + beta[:, None, None]
                            * F.normalize(k, dim=-1)[:, :, None] * v[:, None, :], "a gate, not an edit"),
    "the write without S": (reader_step(plus_S=False), "the write alone"),
    "S changed in place": (reader_step(in_place="S"), "changed its argument S in place"),
    "k changed in place": (reader_step(in_place="k"), "changed its argument k in place"),
    "beta (B,) times (B, d_v)": (reader_step(beta_as_given=True), "beta[:, None] scales a key"),
    "an identity sized d_v": (lambda S, k, v, beta: expanded(S, k, v, beta, eye_size=lambda S: S.shape[2]),
                              "works for keys of length 0.3 to 3, d_k = d_v = 4 but not for d_k = 5, d_v = 3"),
    "an identity in float64": (lambda S, k, v, beta: expanded(S, k, v, beta, eye_dtype=torch.float64),
                               "works in float64 but not with float32 inputs"),
    "a pair returned": (lambda S, k, v, beta: (reader_step()(S, k, v, beta), None), "must return a tensor"),
    "no usual mistake": (lambda S, k, v, beta: 2 * reader_step()(S, k, v, beta) - S, "None of the usual mistakes"),
}


@pytest.mark.parametrize("name", STEP_MISTAKES)
def test_step_checker_names_the_mistake(name):
    wrong, expected = STEP_MISTAKES[name]
    problem = exercise.diagnose_delta_step(wrong)
    assert problem is not None and expected in problem, problem


def test_each_named_mistake_has_its_own_message():
    """Every entry of the checker's catalogue that a test above names is reached by that test's step alone."""
    messages = {m for m, _ in exercise._mistakes()}
    found = {exercise.diagnose_delta_step(wrong) for wrong, _ in STEP_MISTAKES.values()}
    assert messages <= found, [m[:60] for m in messages - found]


@pytest.mark.parametrize("step", [exercise.reference, reader_step(), expanded, in_float32], ids=lambda f: f.__name__)
def test_step_checker_accepts_right_steps_in_either_precision(step, capsys):
    assert exercise.diagnose_delta_step(step) is None
    exercise.check_delta_step(step)
    assert capsys.readouterr().out.startswith("✓")


def test_the_cases_have_batches_and_tell_the_mistakes_apart():
    """B > 1 (a key normalised over the whole batch is right when B = 1), never B = d_k or d_v (so beta * k
    and S @ k fail rather than broadcast), keys of other lengths than 1, a square and a non-square state,
    and float32 inputs."""
    assert all(c.B > 1 and c.B not in (c.d_k, c.d_v) for c in exercise.CASES)
    assert any(c.d_k == c.d_v for c in exercise.CASES) and any(c.d_k != c.d_v for c in exercise.CASES)
    assert any(not c.unit_keys for c in exercise.CASES) and any(c.dtype == torch.float32 for c in exercise.CASES)
    for case in exercise.CASES:
        S, k, v, beta = exercise._inputs(case)
        assert S.dtype == k.dtype == v.dtype == beta.dtype == case.dtype
        lengths = k.double().norm(dim=-1)
        assert torch.allclose(lengths, torch.ones_like(lengths)) == case.unit_keys


def test_the_square_case_shows_s_k_as_wrong_values_and_the_other_as_an_error():
    problem = exercise.diagnose_delta_step(reader_step(reads="S k"))
    assert "S k where it needs Sᵀk" in problem and "raised" not in problem
    case = next(c for c in exercise.CASES if c.d_k != c.d_v)
    with pytest.raises(RuntimeError):
        reader_step(reads="S k")(*exercise._inputs(case))


def test_check_raises_with_plain_message():
    with pytest.raises(exercise.DeltaRuleCheckError, match="wrong sign"):
        exercise.check_delta_step(reader_step(sign="+"))


# ----------------------------------------------------------------------------- read

def read(S, q):
    return torch.einsum("bkv,bk->bv", S, q)


READ_MISTAKES = {
    "stub": (stub, "still the stub"),
    "S q": (lambda S, q: (S @ q[:, :, None]).squeeze(-1), "S q where it needs Sᵀq"),
    "q normalised": (lambda S, q: read(S, F.normalize(q, dim=-1)), "read() normalises q"),
    "S @ q": (lambda S, q: S @ q, "S q has no shape"),
}


@pytest.mark.parametrize("name", READ_MISTAKES)
def test_read_checker_names_the_mistake(name):
    wrong, expected = READ_MISTAKES[name]
    problem = exercise.diagnose_read(wrong)
    assert problem is not None and expected in problem, problem


def test_read_checker_accepts_the_read(capsys):
    exercise.check_read(read)
    assert capsys.readouterr().out.startswith("✓")


# ----------------------------------------------------------------------------- the edit

def test_the_edit_returns_the_new_value_and_says_what_linear_attention_returns(capsys):
    for step in (exercise.reference, reader_step(), expanded):
        assert exercise.diagnose_edit(step) is None
    exercise.check_edit(reader_step())
    out = capsys.readouterr().out
    assert out.startswith("✓") and "returns (0, 3, -1) for k" in out and "the sum (1, 3, 1)" in out, out
    assert "still returns (5, 5, 5)" in out, out


@pytest.mark.parametrize("step, expected", [
    (stub, "still the stub"),
    (reader_step(sign="none"), "the sum of both values: linear attention's additive write"),
    (reader_step(norm="none"), "run check_delta_step"),
    (STEP_MISTAKES["a fade, not an edit"][0], "the edit reached another memory"),
], ids=["stub", "additive", "not normalised", "fade"])
def test_edit_checker_names_the_mistake(step, expected):
    problem = exercise.diagnose_edit(step)
    assert problem is not None and expected in problem, problem
    with pytest.raises(exercise.DeltaRuleCheckError):
        exercise.check_edit(step)
