"""Support code for the delta rule's exercise (lesson 7, "Memory that edits itself").

The reader writes one step of the delta rule, and the read that goes with it:

    delta_step(S, k, v, beta) -> S_new      S (B, d_k, d_v)  the state, one matrix per batch row
                                            k (B, d_k)       keys of any length: the step normalises them,
                                                             k <- k / ||k||, as lessonlib.models.deltanet does
                                            v (B, d_v)       values
                                            beta (B,)        write strengths in (0, 1)
                                            S_new = S + beta k (v - S^T k)^T   with the unit k, (B, d_k, d_v)
    read(S, q) -> o                         o = S^T q (B, d_v), q (B, d_k) used as given

The contract puts the normalisation inside the step, so that forgetting it is a mistake the checker
can see: it passes keys of other lengths than 1 (and unit keys first, where the algebra alone is
judged). `check_delta_step` compares the reader's step with lessonlib.models.delta_rule.delta_rule_step
in float64 on random cases (d_k = d_v first, where S k has a shape and gives the wrong values, then
d_k != d_v, where it has none; then float32 inputs), and names the usual mistake by computing what
each one would return: the correction's sign, beta on the wrong term or missing, a key not
normalised or normalised over the wrong axis, S k for S^T k, the outer product transposed, the
additive write of linear attention, a state faded instead of edited, the write returned without S.
Anything else gets the largest difference. `check_read` does the same for the read (S q for S^T q).
`check_edit` shows the edit with the reader's step: the same key written twice with beta = 1
returns the second value, where linear attention's additive write returns the sum.
The `diagnose_*` functions return the message (None when all is well), for tests.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from lessonlib.exercises.calls import STUB, call
from lessonlib.models.delta_rule import delta_rule_step

Step = Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]  # (S, k, v, beta) -> S_new
Read = Callable[[Tensor, Tensor], Tensor]  # (S, q) -> o

SHAPES = ("S is (B, d_k, d_v), k (B, d_k), v (B, d_v) and beta (B,): beta[:, None] scales a key, "
          "beta[:, None, None] a state.")


class DeltaRuleCheckError(AssertionError):
    """A checker's verdict on the reader's code, in one plain message."""


# ----------------------------------------------------------------------------- the pieces, batched

def _unit(k: Tensor) -> Tensor:
    return k / k.norm(dim=-1, keepdim=True)


def _reads(S: Tensor, k: Tensor) -> Tensor:
    return torch.einsum("bkv,bk->bv", S, k)  # S^T k, (B, d_v)


def _outer(a: Tensor, b: Tensor) -> Tensor:
    return a[:, :, None] * b[:, None, :]  # a b^T, (B, len a, len b)


def reference(S: Tensor, k: Tensor, v: Tensor, beta: Tensor) -> Tensor:
    """The exercise's step: lessonlib.models.delta_rule.delta_rule_step with the key normalised first."""
    return delta_rule_step(S, _unit(k), v, beta)


# ----------------------------------------------------------------------------- the usual mistakes

def _mistakes() -> list[tuple[str, Step]]:
    """(message, what a step with that mistake returns), in the order they are tried."""
    def b(beta: Tensor) -> Tensor:
        return beta[:, None, None]

    def write(S: Tensor, k: Tensor, delta: Tensor, beta: Tensor) -> Tensor:
        return S + b(beta) * _outer(k, delta)

    def square(fn: Step) -> Step:  # S k and (..) k^T only have a shape when d_k = d_v
        return lambda S, k, v, beta: fn(S, k, v, beta) if S.shape[-1] == S.shape[-2] else None

    def Sk(S: Tensor, k: Tensor) -> Tensor:
        return torch.einsum("bkv,bv->bk", S, k)

    sign = ("the correction has the wrong sign: your step writes beta k (v + Sᵀk)ᵀ. Sᵀk is what the state "
            "returns for k now, and the write takes it away: S + beta k (v − Sᵀk)ᵀ, so that afterwards the state "
            "returns (1 − beta) Sᵀk + beta v for k, a step from its old value towards v.")
    backwards = ("the difference is the wrong way round: your step writes beta k (Sᵀk − v)ᵀ, which moves what the "
                 "state returns for k away from v. The delta is the value wanted minus the value the state returns "
                 "now: S + beta k (v − Sᵀk)ᵀ.")
    beta_on_v = ("beta multiplies v only: your step writes k (beta v − Sᵀk)ᵀ, which takes out all of the old value "
                 "and puts back only beta of the new one. beta scales the whole correction, beta k (v − Sᵀk)ᵀ; in "
                 "the form (I − beta k kᵀ) S + beta k vᵀ it appears twice.")
    beta_on_old = ("beta multiplies Sᵀk only: your step writes k (v − beta Sᵀk)ᵀ, which adds all of v and takes out "
                   "only beta of the old value. beta scales the whole correction, beta k (v − Sᵀk)ᵀ; in the form "
                   "(I − beta k kᵀ) S + beta k vᵀ it appears twice.")
    no_beta = ("beta is missing: your step writes k (v − Sᵀk)ᵀ, as if beta were 1 for every row. beta scales "
               "the correction, S + beta k (v − Sᵀk)ᵀ: beta[:, None] * k, one strength per batch row.")
    raw_key = ("k is not normalised: your step writes with k as given, and the checker passes keys of length "
               "0.3 to 3. Divide each key by its length first, k = k / k.norm(dim=-1, keepdim=True) "
               "(or F.normalize(k, dim=-1)): with a key of length ||k|| the write scales what S holds along k by "
               "1 − beta ||k||², which overshoots once beta ||k||² > 1 and grows once it is above 2.")
    half_key = ("k is normalised in one place only: the read Sᵀk and the write k (…)ᵀ must use the same unit key. "
                "Normalise k once, at the top of the step, and use that k in both.")
    batch_norm = ("k is divided by the length of the whole batch of keys (k.norm() with no dim): each key has its "
                  "own length, k / k.norm(dim=-1, keepdim=True).")
    batch_axis = ("k is normalised along the batch axis (dim=0): each key is a row of k, so divide by "
                  "k.norm(dim=-1, keepdim=True).")
    s_k = ("your step reads the state with S k where it needs Sᵀk: S is (B, d_k, d_v), one row per key dimension, "
           "so what it returns for k is the rows weighted by k, Sᵀk = torch.einsum('bkv,bk->bv', S, k), of shape "
           "(B, d_v). S k has a shape only when d_k = d_v, and then it is the wrong vector.")
    transposed = ("the outer product is transposed: your write is beta (v − Sᵀk) kᵀ, of shape (d_v, d_k), where S "
                  "is (d_k, d_v). Key dimension first: beta k (v − Sᵀk)ᵀ, that is k[:, :, None] * delta[:, None, :].")
    s_transposed = ("your step treats S as (d_v, d_k): it reads S k and writes (v − S k) kᵀ, the delta rule for the "
                    "transposed state. Here S is (B, d_k, d_v): read Sᵀk and write beta k (v − Sᵀk)ᵀ.")
    additive = ("your step only adds: S + beta k vᵀ is linear attention's write. Nothing is taken out, so a key "
                "written twice returns the sum of its values. The delta rule first takes away what the state "
                "returns for k: S + beta k (v − Sᵀk)ᵀ.")
    fade = ("your step fades the whole state, (1 − beta) S + beta k vᵀ: a gate, not an edit, which forgets what S "
            "holds for every key. The delta rule changes S only along k: S + beta k (v − Sᵀk)ᵀ = "
            "(I − beta k kᵀ) S + beta k vᵀ.")
    no_S = ("your step returns the write alone, beta k (v − Sᵀk)ᵀ, without the state it edits: S_new = S + that.")

    return [
        (sign, lambda S, k, v, beta: write(S, _unit(k), v + _reads(S, _unit(k)), beta)),
        (backwards, lambda S, k, v, beta: write(S, _unit(k), _reads(S, _unit(k)) - v, beta)),
        (beta_on_v, lambda S, k, v, beta: S + _outer(_unit(k), beta[:, None] * v - _reads(S, _unit(k)))),
        (beta_on_old, lambda S, k, v, beta: S + _outer(_unit(k), v - beta[:, None] * _reads(S, _unit(k)))),
        (no_beta, lambda S, k, v, beta: delta_rule_step(S, _unit(k), v, torch.ones_like(beta))),
        (raw_key, lambda S, k, v, beta: delta_rule_step(S, k, v, beta)),
        (half_key, lambda S, k, v, beta: write(S, k, v - _reads(S, _unit(k)), beta)),
        (half_key, lambda S, k, v, beta: write(S, _unit(k), v - _reads(S, k), beta)),
        (batch_norm, lambda S, k, v, beta: delta_rule_step(S, k / k.norm(), v, beta)),
        (batch_axis, lambda S, k, v, beta: delta_rule_step(S, k / k.norm(dim=0, keepdim=True), v, beta)),
        (s_k, square(lambda S, k, v, beta: write(S, _unit(k), v - Sk(S, _unit(k)), beta))),
        (transposed, square(lambda S, k, v, beta: S + b(beta) * _outer(v - _reads(S, _unit(k)), _unit(k)))),
        (s_transposed, square(lambda S, k, v, beta: S + b(beta) * _outer(v - Sk(S, _unit(k)), _unit(k)))),
        (additive, lambda S, k, v, beta: write(S, _unit(k), v, beta)),
        (additive, lambda S, k, v, beta: write(S, k, v, beta)),
        (additive, lambda S, k, v, beta: S + _outer(_unit(k), v)),
        (fade, lambda S, k, v, beta: (1 - b(beta)) * S + b(beta) * _outer(_unit(k), v)),
        (no_S, lambda S, k, v, beta: reference(S, k, v, beta) - S),
    ]


# ----------------------------------------------------------------------------- the cases

@dataclass(frozen=True)
class Case:
    what: str  # in words, for the messages
    B: int  # never equal to d_k or d_v, so that beta * k or S @ k broadcasts into an error, not a number
    d_k: int
    d_v: int
    unit_keys: bool
    dtype: torch.dtype = torch.float64


CASES = (
    Case("unit keys, d_k = d_v = 4", 3, 4, 4, unit_keys=True),
    Case("keys of length 0.3 to 3, d_k = d_v = 4", 3, 4, 4, unit_keys=False),
    Case("keys of length 0.3 to 3, d_k = 5, d_v = 3", 2, 5, 3, unit_keys=False),
    Case("float32 inputs, d_k = 5, d_v = 3", 2, 5, 3, unit_keys=False, dtype=torch.float32),
)


def _inputs(case: Case, seed: int = 0) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    g = torch.Generator().manual_seed(seed)
    f64 = torch.float64
    S = torch.randn(case.B, case.d_k, case.d_v, generator=g, dtype=f64)  # a state already holding something
    k = _unit(torch.randn(case.B, case.d_k, generator=g, dtype=f64))
    if not case.unit_keys:
        k = k * torch.linspace(0.3, 3.0, case.B, dtype=f64)[:, None]  # lengths from 0.3 to 3, none of them 1
    v = torch.randn(case.B, case.d_v, generator=g, dtype=f64)
    beta = torch.linspace(0.2, 0.8, case.B, dtype=f64)  # never 1: a missing beta shows
    return tuple(x.to(case.dtype) for x in (S, k, v, beta))


def _tolerance(x: Tensor) -> dict[str, float]:
    return dict(rtol=1e-9, atol=1e-12) if x.dtype == torch.float64 else dict(rtol=1e-5, atol=1e-6)


def _same(x: Tensor, y: Tensor | None) -> bool:
    return y is not None and x.shape == y.shape and torch.allclose(x.double(), y.double(), **_tolerance(x))


# ----------------------------------------------------------------------------- delta_step

def _named_mistake(got: Tensor, args: tuple[Tensor, ...]) -> str | None:
    args = tuple(a.double() for a in args)
    for message, mistake in _mistakes():
        if _same(got, mistake(*args)):
            return message
    return None


def diagnose_delta_step(step: Step) -> str | None:
    passed: list[str] = []
    for case in CASES:
        args = _inputs(case)
        kept = tuple(a.clone() for a in args)
        got, problem = call("delta_step", step, *args)
        if problem:
            if passed and case.dtype != torch.float64 and not problem.endswith(STUB):
                return (f"{problem} It works in float64 but not with {case.what}: a tensor made inside the step "
                        "with a fixed dtype? Make it like its inputs, e.g. torch.eye(d_k, dtype=S.dtype).")
            if passed and case.d_k != case.d_v and not problem.endswith(STUB):
                return (f"{problem} It works for {passed[-1]} but not for d_k = {case.d_k}, d_v = {case.d_v}: a "
                        f"product along the wrong axis of S, or S k for Sᵀk? {SHAPES}")
            return problem if problem.endswith(STUB) else f"{problem} {SHAPES}"
        for name, a, b in zip(("S", "k", "v", "beta"), args, kept):
            if not torch.equal(a, b):
                return (f"delta_step changed its argument {name} in place (S += …, k /= … or an in-place method "
                        "ending in _): build new tensors, S_new = S + …, since the caller still needs the old ones.")
        if not isinstance(got, Tensor):
            return f"delta_step() must return a tensor, the new state, not {type(got).__name__}."
        if got.shape != args[0].shape:
            hint = (" That is (B, d_v, d_k): the outer product is transposed; the write is k (v − Sᵀk)ᵀ, key dimension "
                    "first." if got.shape == (case.B, case.d_v, case.d_k) else "")
            return (f"for S of shape {tuple(args[0].shape)} = (B, d_k, d_v) ({case.what}), S_new should have that "
                    f"shape too, not {tuple(got.shape)}.{hint}")
        if not got.dtype.is_floating_point:
            return f"delta_step() returned {got.dtype}, where the state is {args[0].dtype}."
        want = reference(*(a.double() for a in args))
        if not _same(got, want):
            named = _named_mistake(got, args)
            if named:
                return named
            gap = (got.double() - want).abs().max().item()
            right = f"; it was right for {' and for '.join(passed)}" if passed else ""
            return (f"for {case.what}, your S_new differs from S + beta k (v − Sᵀk)ᵀ (k normalised) by up to "
                    f"{gap:.3g}{right}. None of the usual mistakes gives your result: print both for one row.")
        passed.append(case.what)
    return None


# ----------------------------------------------------------------------------- read

def diagnose_read(read: Read) -> str | None:
    for case in CASES[1:]:  # keys of other lengths serve as queries: read uses q as given
        S, q, _, _ = _inputs(case, seed=1)
        o, problem = call("read", read, S, q)
        if problem:
            if problem.endswith(STUB):
                return problem
            return (f"{problem} S is (B, d_k, d_v) and q (B, d_k): Sᵀq = torch.einsum('bkv,bk->bv', S, q) "
                    "contracts d_k, and S q has no shape when d_k ≠ d_v.")
        if not isinstance(o, Tensor):
            return f"read() must return a tensor, not {type(o).__name__}."
        want = _reads(S.double(), q.double())
        if o.shape != want.shape:
            return (f"for S of shape {tuple(S.shape)} = (B, d_k, d_v), o should be (B, d_v) = {tuple(want.shape)}, "
                    f"not {tuple(o.shape)}.")
        if _same(o, want):
            continue
        if case.d_k == case.d_v and _same(o, torch.einsum("bkv,bv->bk", S.double(), q.double())):
            return ("read() computes S q where it needs Sᵀq: S is (B, d_k, d_v), one row per key dimension, so the "
                    "read weights the rows by q, torch.einsum('bkv,bk->bv', S, q).")
        if _same(o, _reads(S.double(), _unit(q.double()))):
            return ("read() normalises q: the read is Sᵀq with q as given (the layer normalises its queries before "
                    "the read, and the step normalises keys; the read itself does not).")
        gap = (o.double() - want).abs().max().item()
        return f"for {case.what}, your o differs from Sᵀq by up to {gap:.3g}."
    return None


# ----------------------------------------------------------------------------- the edit

EDIT_KEY = torch.tensor([[1.0, 1.0, 1.0, 1.0]], dtype=torch.float64)  # length 2: the step normalises it
OTHER_KEY = torch.tensor([[1.0, -1.0, 1.0, -1.0]], dtype=torch.float64) / 2  # a unit key orthogonal to it
V_OLD = torch.tensor([[1.0, 0.0, 2.0]], dtype=torch.float64)
V_NEW = torch.tensor([[0.0, 3.0, -1.0]], dtype=torch.float64)
V_OTHER = torch.tensor([[5.0, 5.0, 5.0]], dtype=torch.float64)


def _fmt(x: Tensor) -> str:
    return "(" + ", ".join(f"{float(t):g}" for t in x.flatten()) + ")"


def _edit(step: Step) -> tuple[Tensor | None, Tensor | None, str | None]:
    """What the state returns for the edited key and for the other one, after writing (OTHER_KEY,
    V_OTHER), then (EDIT_KEY, V_OLD), then (EDIT_KEY, V_NEW), each with beta = 1, from S = 0."""
    S = torch.zeros(1, 4, 3, dtype=torch.float64)
    one = torch.ones(1, dtype=torch.float64)
    for k, v in ((OTHER_KEY, V_OTHER), (EDIT_KEY, V_OLD), (EDIT_KEY, V_NEW)):
        S, problem = call("delta_step", step, S, k.clone(), v.clone(), one.clone())
        if problem:
            return None, None, problem
        if not isinstance(S, Tensor) or S.shape != (1, 4, 3):
            return None, None, "delta_step() must return the new state, a tensor shaped like S: run check_delta_step."
    return _reads(S.double(), _unit(EDIT_KEY)), _reads(S.double(), OTHER_KEY), None


def diagnose_edit(step: Step) -> str | None:
    edited, other, problem = _edit(step)
    if problem:
        return problem
    setup = (f"after writing {_fmt(V_OLD)} and then {_fmt(V_NEW)} under the same key with beta = 1, your state "
             f"returns {_fmt(edited)} for that key")
    if _same(edited, V_OLD + V_NEW):
        return (f"{setup}, the sum of both values: linear attention's additive write, where nothing is taken out. "
                f"The delta rule returns {_fmt(V_NEW)}, the old value replaced.")
    if not _same(edited, V_NEW):
        return f"{setup}, where the delta rule returns {_fmt(V_NEW)}: run check_delta_step to see why."
    if not _same(other, V_OTHER):
        return (f"the edit reached another memory: a key orthogonal to the edited one held {_fmt(V_OTHER)}, and "
                f"after the edit your state returns {_fmt(other)} for it. The write changes S only along k.")
    return None


# ----------------------------------------------------------------------------- the checks

def _check(problem: str | None, success: str) -> None:
    if problem:
        raise DeltaRuleCheckError(problem)
    print(f"✓ {success}")


def check_delta_step(step: Step) -> None:
    _check(diagnose_delta_step(step), "delta_step equals S + beta k (v − Sᵀk)ᵀ with k normalised: "
                                      + "; ".join(c.what for c in CASES) + ".")


def check_read(read: Read) -> None:
    _check(diagnose_read(read), "read returns Sᵀq, for d_k = d_v and for d_k ≠ d_v.")


def check_edit(step: Step) -> None:
    """The edit, with the reader's step: prints what the state returns, and what linear attention would."""
    problem = diagnose_edit(step)
    if problem:
        raise DeltaRuleCheckError(problem)
    edited, other, _ = _edit(step)
    print(f"✓ key k written with {_fmt(V_OLD)}, then with {_fmt(V_NEW)} (beta = 1): your state returns "
          f"{_fmt(edited)} for k, the old value replaced; linear attention's S + k vᵀ would return the sum "
          f"{_fmt(V_OLD + V_NEW)}. A key orthogonal to k still returns {_fmt(other)}, as written before the edit.")
