"""Support code for the exercise notebook docs/lessons/exercise-scan.ipynb.

The reader writes two functions:

    combine(earlier, later) -> (A, B)   earlier, later: pairs (A, B) of tensors, each the map h -> A * h + B;
                                        the pair of doing `earlier` and then `later`: (A2 * A1, A2 * B1 + B2)
    scan(a, b, h0) -> h                 a, b (B, T, D), h0 (B, D) -> h (B, T, D), h_t = a_t * h_{t-1} + b_t,
                                        in about log2 T rounds of whole-tensor operations

`check_combine` and `check_scan` compare each with lessonlib.models.scan.scan_loop in float64 and
name the usual mistake: the pairs combined in the wrong order, a result shifted by one step, h0
forgotten or not passed through a_1, too few rounds, a round that reads the A it has just
updated, a product that underflows, or a loop in disguise. `check_min_gru` trains nothing: it
runs a minGRU's coefficients through the reader's scan against the model's own step-by-step form,
gradients included. `counts(scan, T)` counts a scan's sequential steps and operations with the
course's one cost function, lessonlib.experiments.cost.count. `blelloch` is the reference for the
notebook's last step: Blelloch's work-efficient scan, written with the same `combine`.
The `diagnose_*` functions return the message (None when all is well), for tests.
"""
from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from lessonlib.exercises.calls import call
from lessonlib.experiments import cost
from lessonlib.models.min_gru import MinGRU
from lessonlib.models.scan import scan_loop

Pair = tuple[Tensor, Tensor]
# Lengths around every power of two up to 64: where a missing round or a shift shows first.
LENGTHS = (1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65)
LONG = 2000  # float32 steps with a_t in (0.3, 0.7): their product is 0 in float32 long before the end


class ScanCheckError(AssertionError):
    """A checker's verdict on the reader's code, in one plain message."""


def combine_reference(earlier: Pair, later: Pair) -> Pair:
    (A1, B1), (A2, B2) = earlier, later
    return A2 * A1, A2 * B1 + B2


def hillis_steele(a: Tensor, b: Tensor, h0: Tensor, combine: Callable[[Pair, Pair], Pair] = combine_reference,
                  rounds: int | None = None, fresh_a: bool = False) -> Tensor:
    """The scan of lessonlib.models.scan.scan_parallel, written with a `combine`; `rounds` and
    `fresh_a` reproduce two mistakes (too few rounds; B combined with the A updated this round)."""
    A = a
    B = torch.cat([(a[:, :1] * h0.unsqueeze(1) + b[:, :1]), b[:, 1:]], dim=1)  # h0 folded into step 1
    d, done = 1, 0
    while d < a.shape[1] and (rounds is None or done < rounds):
        A_new, B_new = combine((A[:, :-d], B[:, :-d]), (A[:, d:], B[:, d:]))
        A_next = torch.cat([A[:, :d], A_new], dim=1)
        if fresh_a:
            _, B_new = combine((A_next[:, :-d], B[:, :-d]), (A_next[:, d:], B[:, d:]))
        A, B = A_next, torch.cat([B[:, :d], B_new], dim=1)
        d, done = 2 * d, done + 1
    return B


def blelloch(a: Tensor, b: Tensor, h0: Tensor, combine: Callable[[Pair, Pair], Pair] = combine_reference) -> Tensor:
    """The same h as hillis_steele, by Blelloch's work-efficient scan (blelloch_pairs)."""
    B = torch.cat([(a[:, :1] * h0.unsqueeze(1) + b[:, :1]), b[:, 1:]], dim=1)  # h0 folded into step 1
    return blelloch_pairs(a, B, combine)[1]


def blelloch_pairs(A: Tensor, B: Tensor, combine: Callable[[Pair, Pair], Pair] = combine_reference) -> Pair:
    """Every prefix of the steps (A, B), each (batch, T, D): position t ends with steps 1..t+1."""
    T, n = A.shape[1], A.shape[1] // 2
    if T == 1:
        return A, B
    # up: positions 2i and 2i+1 combine, and the n pairs are scanned the same way
    odd = blelloch_pairs(*combine((A[:, 0:2 * n:2], B[:, 0:2 * n:2]), (A[:, 1:2 * n:2], B[:, 1:2 * n:2])), combine)
    # down: each even position 2i >= 2 is the prefix of position 2i-1, then its own step
    m = (T - 1) // 2
    later = combine((odd[0][:, :m], odd[1][:, :m]), (A[:, 2::2], B[:, 2::2])) if m else (A[:, :0], B[:, :0])
    even = [torch.cat([first[:, :1], rest], dim=1) for first, rest in zip((A, B), later)]
    return _interleave(even[0], odd[0]), _interleave(even[1], odd[1])


def _interleave(even: Tensor, odd: Tensor) -> Tensor:
    """Positions 0, 2, 4, ... from `even` and 1, 3, 5, ... from `odd` (even has as many, or one more)."""
    k = odd.shape[1]
    return torch.cat([torch.stack([even[:, :k], odd], dim=2).flatten(1, 2), even[:, k:]], dim=1)


def _inputs(T: int, seed: int = 0, dtype: torch.dtype = torch.float64) -> tuple[Tensor, Tensor, Tensor]:
    g = torch.Generator().manual_seed(seed)
    a = (0.3 + 0.4 * torch.rand(2, T, 3, generator=g, dtype=torch.float64)).to(dtype)  # decays in (0.3, 0.7)
    b = torch.randn(2, T, 3, generator=g, dtype=torch.float64).to(dtype)  # inputs of both signs
    h0 = torch.randn(2, 3, generator=g, dtype=torch.float64).to(dtype)
    return a, b, h0


def _same(x: Tensor, y: Tensor) -> bool:
    return x.shape == y.shape and torch.allclose(x, y, rtol=1e-9, atol=1e-12)


# ----------------------------------------------------------------------------- combine

def diagnose_combine(combine: Callable[[Pair, Pair], Pair]) -> str | None:
    earlier = (torch.tensor([2.0]), torch.tensor([3.0]))  # h -> 2h + 3
    later = (torch.tensor([5.0]), torch.tensor([7.0]))  # h -> 5h + 7
    out, problem = call("combine", combine, earlier, later)
    if problem:
        return problem
    if not (isinstance(out, (tuple, list)) and len(out) == 2 and all(isinstance(t, Tensor) for t in out)):
        return "combine() must return a pair of tensors (A, B)."
    A, B = (t.item() for t in out)
    if A != 10.0:
        return (f"for the steps h -> 2h + 3 and then h -> 5h + 7, A should be 5 * 2 = 10, not {A:g}: "
                "the decays multiply.")
    if B == 17.0:
        return ("combine applies the steps in the wrong order: for h -> 2h + 3 and then h -> 5h + 7 it gives "
                "2 * 7 + 3 = 17, which is h -> 5h + 7 first. The later step acts on the earlier one's result: "
                "5 * (2h + 3) + 7 = 10h + 22, so B = A2 * B1 + B2.")
    if B == 10.0:
        return ("combine drops the later step's A from B: the earlier B passes through the later step too, "
                "5 * (2h + 3) + 7 = 10h + 22, so B = A2 * B1 + B2.")
    if B != 22.0:
        return (f"for h -> 2h + 3 and then h -> 5h + 7, the pair is (10, 22): 5 * (2h + 3) + 7 = 10h + 22. "
                f"Yours: ({A:g}, {B:g}).")
    return None


# ----------------------------------------------------------------------------- scan

def _named_mistake(h: Tensor, a: Tensor, b: Tensor, h0: Tensor) -> str | None:
    """The message for a wrong h of the right shape that matches a known mistake, else None."""
    T = a.shape[1]
    loop = scan_loop(a, b, h0)
    if _same(h, torch.cat([h0.unsqueeze(1), loop[:, :-1]], dim=1)):
        return ("your result is shifted by one step: position t holds h_{t-1} (position 0 holds h0). "
                "Position t must hold the state after step t, so the first entry is a_1 * h0 + b_1.")
    if _same(h, scan_loop(a, b)):
        return "h0 is ignored: your result is the scan from zeros. Fold it into the first step: b_1 <- a_1 * h0 + b_1."
    if _same(h, scan_loop(a, torch.cat([b[:, :1] + h0.unsqueeze(1), b[:, 1:]], dim=1))):
        return ("h0 is added to b_1 without passing through a_1: the first step maps h0 to a_1 * h0 + b_1, "
                "so fold it in as b_1 <- a_1 * h0 + b_1.")
    swapped = hillis_steele(a, b, h0, combine=lambda earlier, later: combine_reference(later, earlier))
    if _same(h, swapped):
        return ("your scan combines each pair in the wrong order: the pair from d steps back is the *earlier* "
                "one, so it goes first: combine(pair[t - d], pair[t]).")
    if _same(h, hillis_steele(a, b, h0, fresh_a=True)):
        return ("within a round, B is combined with the A this round has already updated. Both updates must "
                "read the pairs as they were before the round: compute the new A and the new B, then assign both.")
    rounds = math.ceil(math.log2(T)) if T > 1 else 0
    if rounds and _same(h, hillis_steele(a, b, h0, rounds=rounds - 1)):
        return (f"your scan stops one round short: at T = {T} it needs ceil(log2 {T}) = {rounds} rounds "
                f"(d = 1, 2, 4, ... while d < T); without the last, every step after step {2 ** (rounds - 1)} "
                "misses its earliest steps.")
    return None


def diagnose_scan(scan: Callable[[Tensor, Tensor, Tensor], Tensor]) -> str | None:
    for T in LENGTHS:
        a, b, h0 = _inputs(T)
        kept = a.clone(), b.clone(), h0.clone()
        h, problem = call("scan", scan, a, b, h0)
        if problem:
            return problem
        if not all(torch.equal(x, y) for x, y in zip((a, b, h0), kept)):
            return ("scan changed its inputs in place (a, b or h0): build new tensors (torch.cat, or a clone "
                    "first), since the caller's a and b are still needed, and autograd needs them unchanged.")
        if not isinstance(h, Tensor):
            return f"scan() must return a tensor, not {type(h).__name__}."
        if h.shape != a.shape:
            hint = " (h0 included: return h_1 ... h_T only)" if h.shape[1:2] == (T + 1,) else ""
            return (f"for a, b of shape {tuple(a.shape)} = (B, T, D), h should have that shape too, "
                    f"not {tuple(h.shape)}{hint}.")
        if not torch.isfinite(h).all():
            return (f"at T = {T} your result has inf or nan for ordinary inputs (a_t in (0.3, 0.7), b_t of both "
                    "signs): a logarithm of a negative b, or a division by a product of the a_t?")
        want = scan_loop(a, b, h0)
        if not _same(h, want):
            named = _named_mistake(h, a, b, h0)
            if named:
                return named
            t = int((~torch.isclose(h, want, rtol=1e-9, atol=1e-12)).any(dim=(0, 2)).nonzero()[0])
            return (f"at T = {T} your result differs from the loop from position {t} on "
                    f"(largest difference {(h - want).abs().max().item():.3g}); lengths below {T} were right.")
    a, b, h0 = _inputs(LONG, dtype=torch.float32)
    h, problem = call("scan", scan, a, b, h0)
    if problem:
        return problem
    if not torch.isfinite(h).all():
        first = int((~torch.isfinite(h)).any(dim=(0, 2)).nonzero()[0])
        return (f"in float32 at T = {LONG} your result is inf or nan from step {first}: the product a_1 ... a_t of "
                "decays below 1 underflowed to 0 (float32 holds nothing below about 1.4e-45, and nothing below "
                "about 1.2e-38 where subnormals are flushed), and something was divided by it. Combining pairs "
                "never divides; when every b_t is positive, logarithms also work, as in "
                "lessonlib.models.scan.scan_log.")
    try:
        steps = counts(scan, 256).sequential_steps
    except NotImplementedError:  # an operation the cost count has no rule for: the scan is right, say nothing
        return None
    if steps > 128:
        return (f"your scan is right, but at T = 256 it takes {steps} sequential steps, each waiting for the one "
                "before: it steps through the positions one at a time. A scan does every position of a round at "
                "once, with operations on slices such as A[:, d:] * A[:, :-d], in ceil(log2 T) = 8 rounds.")
    return None


# ----------------------------------------------------------------------------- counting and minGRU

def counts(scan: Callable[[Tensor, Tensor, Tensor], Tensor], T: int) -> cost.Cost:
    """cost.count of scan(a, b, h0) at length T, for one batch row and channel: its sequential steps
    (the longest chain of operations, each needing the one before) and its operations."""
    a, b, h0 = _inputs(T)
    a, b, h0 = a[:1, :, :1], b[:1, :, :1], h0[:1, :1]  # (1, T, 1): the count per row and channel
    return cost.count(lambda: scan(a, b, h0))


def diagnose_min_gru(scan: Callable[[Tensor, Tensor, Tensor], Tensor]) -> str | None:
    """A minGRU's a_t and b_t through the reader's scan, against the model's step-by-step form."""
    torch.manual_seed(0)
    model = MinGRU(3, 4, decay_bias=-3.0).double()
    x = torch.randn(2, 50, 3, dtype=torch.float64)
    h0 = torch.randn(2, 4, dtype=torch.float64)
    a, b = model.coefficients(x)
    h, problem = call("scan", scan, a, b, h0)
    if problem:
        return problem
    steps, state = [], h0
    for t in range(x.shape[1]):
        out, state = model.step(x[:, t], state)
        steps.append(out)
    want = torch.stack(steps, dim=1)  # (B, T, H)
    if not _same(h.detach(), want.detach()):
        gap = (h - want).abs().max().item()
        return f"through your scan the minGRU differs from its step-by-step form by {gap:.3g}."
    if not h.requires_grad:
        return "no gradient flows through your scan: do not detach or use torch.no_grad(); training needs it."
    got = torch.autograd.grad(h.square().sum(), model.linear_z.weight)[0]
    ref = torch.autograd.grad(want.square().sum(), model.linear_z.weight)[0]
    if not torch.allclose(got, ref, rtol=1e-8, atol=1e-10):
        return "the gradient through your scan differs from the loop's: is an in-place update breaking autograd?"
    return None


def _check(problem: str | None, success: str) -> None:
    if problem:
        raise ScanCheckError(problem)
    print(f"✓ {success}")


def check_combine(combine: Callable[[Pair, Pair], Pair]) -> None:
    _check(diagnose_combine(combine), "combine does the earlier step, then the later: (A2 * A1, A2 * B1 + B2).")


def check_scan(scan: Callable[[Tensor, Tensor, Tensor], Tensor]) -> None:
    _check(diagnose_scan(scan), f"scan equals the loop at {len(LENGTHS)} lengths from 1 to {LENGTHS[-1]}, stays "
                                f"finite over {LONG:,} float32 steps, and works a round at a time.")


def check_min_gru(scan: Callable[[Tensor, Tensor, Tensor], Tensor]) -> None:
    _check(diagnose_min_gru(scan), "a minGRU run through your scan equals its step-by-step form, gradients included.")
