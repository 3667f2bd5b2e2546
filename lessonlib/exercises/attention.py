"""Support code for the exercise notebook docs/lessons/exercise-attention.ipynb.

The reader writes one function,

    attend(decoder_states, encoder_outputs) -> (context, weights)
        decoder_states  (B, T_out, H)   the decoder's hidden state at every output step (queries)
        encoder_outputs (B, T_in, H)    the encoder's hidden state after every input token
        weights         (B, T_out, T_in) = softmax(decoder_states @ encoder_outputs^T / sqrt(H))
        context         (B, T_out, H)   = weights @ encoder_outputs

`check(attend)` compares it with lessonlib.models.attention.dot_product_attention and says in plain
words what is wrong; `diagnose(attend)` returns that message (None when all is well) for tests.
`train(attend, ...)` trains lessonlib.models.seq2seq's model on digit reversal with the reader's function
as its attention (or without attention for attend=None), on the budget TRAINING, small enough for a
laptop.

Part two adds a padding mask, ``attend(decoder_states, encoder_outputs, mask=None)`` with mask
(B, T_in) boolean, True at real tokens: padded positions must get a weight of exactly 0 and every
row must still sum to 1. `check_mask` / `diagnose_mask` test it, and name the classic slips (the
mask ignored, applied after the softmax, filled with 0 instead of -inf, inverted).
The notebook then measures the mask's effect with lessonlib.experiments.padding.
`check_learned(model, accuracy)` judges the outcome of part one's model with attention against OUTCOME.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch
from torch import Tensor

from lessonlib import memo
from lessonlib.exercises.calls import loss_ends
from lessonlib.experiments.padding import PaddingEffect
from lessonlib.models import seq2seq
from lessonlib.models.attention import dot_product_attention

Attend = Callable[..., tuple[Tensor, Tensor]]  # (decoder_states, encoder_outputs[, mask]) -> (context, weights)

# The training budget of the notebook: both models get the same. lr is higher than the lesson's
# (5e-3) because the budget is shorter.
TRAINING = dict(steps=800, lr=1e-2, min_len=3, max_len=12, hidden=64)
# What the course's solution reaches on that budget (the tests check it, with the notebook run
# from top to bottom); the notebook prints these beside the reader's numbers.
EXPECT_SHORT = 0.9  # exact match at the shortest length, with attention
EXPECT_GAIN = 0.2   # at the longest length: with attention minus without (the solution: about 0.3)


class AttentionCheckError(AssertionError):
    """A failed check, shown in a notebook as its message alone (no traceback into lessonlib)."""

    def _render_traceback_(self) -> list[str]:  # IPython shows these lines instead of a traceback
        return [f"✗ {self}"]


# ----------------------------------------------------------------------------- the checker

def _close(a: Tensor, b: Tensor) -> bool:
    return a.shape == b.shape and torch.allclose(a.float(), b.float(), atol=1e-5, rtol=1e-4)


def _call(attend: Attend, q: Tensor, k: Tensor, *mask: Tensor
          ) -> tuple[tuple[Tensor, Tensor] | None, str | None]:
    """attend(q, k) or, with a mask, attend(q, k, mask); a problem in words if it fails."""
    try:
        out = attend(q, k, *mask)
    except NotImplementedError:
        return None, "attend() is still the stub: replace `raise NotImplementedError` with your code."
    except TypeError as e:
        if mask and "positional argument" in str(e):
            return None, ("attend() takes no mask yet: give it a third parameter, "
                          "attend(decoder_states, encoder_outputs, mask=None).")
        return None, _raised(e, q, k, *mask)
    except Exception as e:  # the reader's bug, reported in one line
        return None, _raised(e, q, k, *mask)
    if not (isinstance(out, (tuple, list)) and len(out) == 2
            and all(isinstance(t, Tensor) for t in out)):
        return None, (f"attend() must return two tensors, (context, weights); it returned "
                      f"{type(out).__name__}.")
    return (out[0], out[1]), None


def _raised(e: Exception, q: Tensor, k: Tensor, *mask: Tensor) -> str:
    called = (f"It was called with decoder_states of shape {tuple(q.shape)} and encoder_outputs of "
              f"shape {tuple(k.shape)}")
    if mask:
        called += (f", and mask of shape {tuple(mask[0].shape)} = (B, T_in): to line it up with the "
                   f"scores (B, T_out, T_in), index it as mask[:, None, :]")
    return f"attend() raised {type(e).__name__}: {e}. {called}."


def _inputs(B: int, T_out: int, T_in: int, H: int, seed: int) -> tuple[Tensor, Tensor, str]:
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, T_out, H, generator=g)
    k = torch.randn(B, T_in, H, generator=g)
    shapes = (f"decoder_states {tuple(q.shape)} = (B, T_out, H), "
              f"encoder_outputs {tuple(k.shape)} = (B, T_in, H)")
    return q, k, shapes


def _shape_problem(context: Tensor, weights: Tensor, want_c: Tensor, want_w: Tensor, shapes: str
                   ) -> str | None:
    B, T_out, T_in = want_w.shape
    c_shape, w_shape = tuple(want_c.shape), tuple(want_w.shape)
    if tuple(context.shape) == w_shape and tuple(weights.shape) == c_shape and c_shape != w_shape:
        return "the two results are swapped: return (context, weights), context first."
    if tuple(weights.shape) != w_shape:
        if tuple(weights.shape) == (B, T_in, T_out):
            return (f"weights have shape {tuple(weights.shape)} = (B, T_in, T_out), transposed: they "
                    f"should be {w_shape} = (B, T_out, T_in), one row per decoder step. Multiply "
                    f"decoder_states @ encoder_outputs.transpose(-2, -1), in that order. ({shapes})")
        return (f"weights should have shape {w_shape} = (B, T_out, T_in), one row of T_in weights "
                f"per decoder step, but have shape {tuple(weights.shape)}. ({shapes})")
    if tuple(context.shape) != c_shape:
        return (f"context should have shape {c_shape} = (B, T_out, H), one H-vector per decoder "
                f"step, but has shape {tuple(context.shape)}. ({shapes})")
    return None


def _context_and_gradients_problem(attend: Attend, q: Tensor, k: Tensor, *mask: Tensor) -> str | None:
    """The context is the weighted sum, and gradients reach both inputs."""
    out, problem = _call(attend, q.clone(), k.clone(), *mask)
    if problem:
        return problem
    context, weights = out
    if not _close(context.detach(), weights.detach() @ k):
        return ("weights are right, but context is not weights @ encoder_outputs, the weighted "
                "sum of the encoder outputs.")
    qg, kg = q.clone().requires_grad_(), k.clone().requires_grad_()
    out, problem = _call(attend, qg, kg, *mask)
    if problem:
        return problem
    if not out[0].requires_grad:
        return ("context carries no gradient: do not detach, convert to NumPy or wrap the code "
                "in torch.no_grad(); the model learns through this function.")
    out[0].sum().backward()
    for name, t in (("decoder_states", qg), ("encoder_outputs", kg)):
        if t.grad is None or not t.grad.abs().sum() > 0:
            return f"no gradient reaches {name}: do not detach it."
    return None


def _diagnose_one(attend: Attend, B: int, T_out: int, T_in: int, H: int, seed: int) -> str | None:
    q, k, shapes = _inputs(B, T_out, T_in, H, seed)
    out, problem = _call(attend, q.clone(), k.clone())
    if problem:
        return problem
    context, weights = out
    want_c, want_w = dot_product_attention(q, k, k, scale=True)
    problem = _shape_problem(context, weights, want_c, want_w, shapes)
    if problem:
        return problem

    # --- weights: a softmax over the right axis, of the right scores
    if not torch.isfinite(weights).all():
        return "weights contain inf or NaN."
    w = weights.detach().float()
    ones = lambda s: torch.allclose(s, torch.ones_like(s), atol=1e-4)  # noqa: E731
    if not ones(w.sum(-1)):
        if (w >= 0).all() and T_out > 1 and ones(w.sum(1)):
            return ("each row of weights should sum to 1 over the encoder positions (the last "
                    "dim), but yours sum to 1 over the decoder steps (dim 1): take the softmax "
                    "with dim=-1.")
        if (w >= 0).all() and B > 1 and ones(w.sum(0)):
            return ("your weights sum to 1 across the batch (dim 0), so examples mix: take the "
                    "softmax over the encoder positions, dim=-1.")
        return ("weights are not a probability distribution over the input tokens: every row "
                "must be non-negative and sum to 1. Apply softmax(dim=-1) to the scores.")
    scores = q @ k.transpose(-2, -1)
    if not _close(w, want_w):
        if _close(w, scores.softmax(-1)):
            return (f"missing scaling: divide the scores by sqrt(H) = sqrt({H}) = {math.sqrt(H):g} "
                    f"before the softmax, or the softmax saturates as H grows.")
        if _close(w, (scores / H).softmax(-1)):
            return (f"you divided the scores by H = {H}; divide by sqrt(H) = {math.sqrt(H):g}.")
        if _close(w, (scores * math.sqrt(H)).softmax(-1)):
            return f"you multiplied the scores by sqrt(H); divide by sqrt(H) = {math.sqrt(H):g}."
        return (f"weights differ from softmax(decoder_states @ encoder_outputs^T / sqrt(H)) by up to "
                f"{(w - want_w).abs().max().item():.3g}. Each score is the dot product of one "
                f"decoder state with one encoder output. ({shapes})")

    # --- context: the weighted sum of the encoder outputs; gradients must reach both inputs
    return _context_and_gradients_problem(attend, q, k)


def diagnose(attend: Attend) -> str | None:
    """What is wrong with ``attend``, in plain words, or None if it matches the reference.

    Tried on a batch of several decoder steps (as in training) and on a single step (as in
    greedy decoding, T_out = 1), with T_out != T_in so that a transposed result shows.
    """
    return _first_problem(_diagnose_one, attend, ((2, 3, 5, 16, 0), (3, 1, 7, 16, 1)))


def _first_problem(diagnose_one: Callable[..., str | None], attend: Attend,
                   cases: tuple[tuple[int, int, int, int, int], ...]) -> str | None:
    """The first problem diagnose_one finds over the cases (B, T_out, T_in, H, seed), if any."""
    for B, T_out, T_in, H, seed in cases:
        problem = diagnose_one(attend, B, T_out, T_in, H, seed)
        if problem:
            if T_out == 1:
                problem += " (This happened for a single decoding step, T_out = 1.)"
            return problem
    return None


def check(attend: Attend) -> None:
    """Print a pass line, or raise AttentionCheckError saying what is wrong."""
    problem = diagnose(attend)
    if problem:
        raise AttentionCheckError(problem)
    print("✓ attend() matches the reference: shapes, softmax axis, scaling, context and gradients.")


# ----------------------------------------------------------------------------- part two: the mask

def _diagnose_mask_one(attend: Attend, B: int, T_out: int, T_in: int, H: int, seed: int) -> str | None:
    q, k, shapes = _inputs(B, T_out, T_in, H, seed)
    # row 0 has no padding at all, the others end early, the last after a single real token
    lengths = torch.linspace(T_in, 1, B).round().long()                      # (B,)
    mask = torch.arange(T_in) < lengths[:, None]                             # (B, T_in): True = real
    shapes += f", mask {tuple(mask.shape)} = (B, T_in), True at real tokens"
    out, problem = _call(attend, q.clone(), k.clone(), mask.clone())
    if problem:
        return problem
    context, weights = out
    want_c, want_w = dot_product_attention(q, k, k, mask=mask[:, None, :])
    problem = _shape_problem(context, weights, want_c, want_w, shapes)
    if problem:
        return problem + " (mask is (B, T_in): index it as mask[:, None, :] to line it up with the scores.)"

    w = weights.detach().float()
    if torch.isnan(w).any():
        return ("weights contain NaN: some row has no key left to read. Did you hide the real "
                "tokens instead of the padding? mask is True at real tokens, so fill the scores "
                "where ~mask.")
    padded = (~mask)[:, None, :].expand_as(w)                                # (B, T_out, T_in)
    on_pad, on_real = w[padded], w[~padded]
    scores = q @ k.transpose(-2, -1) / math.sqrt(H)
    if _close(w, want_w):
        return _context_and_gradients_problem(attend, q, k, mask)
    if (on_pad > 0).any():
        if _close(w, scores.softmax(-1)):
            return ("the mask is ignored: padded positions still get weight. Before the softmax, "
                    "set their scores to float('-inf'): scores.masked_fill(~mask[:, None, :], "
                    "float('-inf')).")
        if _close(w, scores.masked_fill(~mask[:, None, :], 0.0).softmax(-1)):
            return ("a score of 0 does not hide a position: exp(0) = 1, so padded positions keep "
                    "weight. Fill their scores with float('-inf'), whose exp is exactly 0.")
        if (on_real.abs() < 1e-6).all():
            return ("you hid the real tokens and kept the padding: mask is True at real tokens, "
                    "so fill the scores where ~mask.")
        return (f"padded positions get weight up to {on_pad.max().item():.3g}; they must get "
                f"exactly 0. ({shapes})")
    row_sums = w.sum(-1)
    if not torch.allclose(row_sums, torch.ones_like(row_sums), atol=1e-4):
        if _close(w, scores.softmax(-1) * mask[:, None, :]):
            return (f"you applied the mask after the softmax: the padded weights are 0, but the "
                    f"rows no longer sum to 1 (one sums to {row_sums.min().item():.2f}), so the "
                    f"context shrinks with the amount of padding. Mask the scores before the "
                    f"softmax: set them to float('-inf') where ~mask.")
        return ("each row of weights must sum to 1 over the real tokens; yours sum to between "
                f"{row_sums.min().item():.2f} and {row_sums.max().item():.2f}.")
    return (f"padded positions get 0, but the other weights differ from the masked softmax by up "
            f"to {(w - want_w).abs().max().item():.3g}. ({shapes})")


def diagnose_mask(attend: Attend) -> str | None:
    """What is wrong with the masked ``attend``, in plain words, or None if it matches the reference.

    Without a mask it must still pass ``diagnose``; with one, it is tried on several decoder
    steps and on a single step, with rows of several lengths (one with no padding at all).
    """
    problem = diagnose(attend)
    if problem:
        return "called without a mask: " + problem
    return _first_problem(_diagnose_mask_one, attend, ((4, 3, 6, 16, 2), (3, 1, 7, 16, 3)))


def check_mask(attend: Attend) -> None:
    """Print a pass line, or raise AttentionCheckError saying what is wrong with the mask."""
    problem = diagnose_mask(attend)
    if problem:
        raise AttentionCheckError(problem)
    print("✓ attend() with a mask matches the reference: padded positions get exactly 0, "
          "every row sums to 1, and it still works without a mask.")


# ----------------------------------------------------------------------------- training

def describe_training(**overrides) -> str:
    """The budget ``train`` uses, in words."""
    b = {**TRAINING, **overrides}
    return (f"{b['steps']} steps of Adam (learning rate {b['lr']:g}) on strings of {b['min_len']} to "
            f"{b['max_len']} digits, hidden size {b['hidden']}")


@memo
def train(attend: Attend | None, *, seed: int = 0, **overrides) -> seq2seq.Seq2Seq:
    """Train lessonlib.models.seq2seq's reverser with ``attend`` as its decoder's attention (None: no
    attention), on the budget TRAINING (``overrides`` replace any of its entries). The same seed
    gives the same batches, and the same initial weights in every layer the two models share, so
    they differ only in attention. The model's ``losses`` are its training loss at every step."""
    losses: list[float] = []
    model = seq2seq.train(attend is not None, seed, attend=attend or seq2seq.luong_attention,
                          progress=False, losses=losses, **{**TRAINING, **overrides})
    model.losses = losses
    return model


# ----------------------------------------------------------------------------- expected outcomes

def _verdict(ok: bool, text: str) -> str:
    return f"{'✓' if ok else '✗'} {text}"


def compare_gain(acc_plain: dict[int, float], acc_yours: dict[int, float]) -> bool:
    """Print the accuracy table and what the course's solution reaches; True if yours does too."""
    print("length   without attention   with your attention")
    for n in acc_plain:
        print(f"{n:6d}   {acc_plain[n]:17.0%}   {acc_yours[n]:19.0%}")
    shortest, longest = min(acc_plain), max(acc_plain)
    gain = acc_yours[longest] - acc_plain[longest]
    print(f"at length {longest} your attention adds {gain:+.0%} exact-match accuracy")
    checks = [
        (acc_yours[shortest] >= EXPECT_SHORT,
         f"expected: with attention at least {EXPECT_SHORT:.0%} at length {shortest} "
         f"(yours: {acc_yours[shortest]:.0%})"),
        (gain >= EXPECT_GAIN,
         f"expected: at length {longest}, attention adds at least {EXPECT_GAIN:+.0%} "
         f"(yours: {gain:+.0%})"),
    ]
    for ok, text in checks:
        print(_verdict(ok, text))
    return all(ok for ok, _ in checks)


def compare_padding(masked: PaddingEffect, unmasked: PaddingEffect, width: int) -> bool:
    """Print the same strings' accuracy alone and padded to ``width``, with and without the mask,
    and what the course's solution gets; True if yours matches."""
    print(f"padded to width {width}")
    print("length   alone   padded, your mask   padded, no mask   answers changed, no mask")
    for n in masked.alone:
        print(f"{n:6d}   {masked.alone[n]:5.0%}   {masked.padded[width][n]:17.0%}   "
              f"{unmasked.padded[width][n]:15.0%}   {unmasked.changed[width][n]:24.0%}")
    changed_masked = max(masked.changed[width].values())
    changed_unmasked = max(unmasked.changed[width].values())
    checks = [
        (changed_masked == 0 and masked.padded[width] == masked.alone,
         f"expected: with your mask, padding changes no answer (yours: up to "
         f"{changed_masked:.0%} changed at a length)"),
        (changed_unmasked > 0,
         f"expected: without a mask, some answers change (here: up to {changed_unmasked:.0%} "
         f"at a length)"),
    ]
    for ok, text in checks:
        print(_verdict(ok, text))
    return all(ok for ok, _ in checks)


# ----------------------------------------------------------------------------- the outcome


@dataclass(frozen=True)
class Outcome:
    """The notebook's training run and the bound its model with attention must pass.

    Where the numbers come from: the notebook's published solution (scaled dot-product
    attention, the same as dot_product_attention) and the model without attention, each trained
    by train on the budget TRAINING (800 steps), seeds 0-7, on a shared 2-core machine; exact
    match on the notebook's 300 fixed strings of length 12, the longest it measures:
        seed            0     1     2     3     4     5     6     7
        with attention  0.427 0.460 0.490 0.447 0.613 0.750 0.627 0.510
        without         0.127 0.140 0.073 0.120 0.190 0.140 0.097 0.113
    (the notebook's run is seed 0, the lowest of the eight). At length 4 the model with attention
    scored 0.99-1.00 on every seed. There is no plateau: the loss starts at a uniform guess
    (ln 13 = 2.565) and its 20-step mean is half a nat below it by step 20 on every seed (step
    21-27 without attention). So
    - steps = 800, the notebook's budget;
    - bound = 0.3 at length 12: 0.13 below the lowest seed, a margin for other CPUs and thread
      counts, and 0.11 above the best model without attention, so passing it takes attention;
    - without = 0.2: a full run no better than this has not used its attention at all;
    - start = 20: a loss still near its start after the budget is no plateau.
    Each seed (both models) took 23-39 s. `measure_outcome(range(8))` measures it again.
    """

    steps: int = TRAINING["steps"]  # the notebook's run, seed 0
    length: int = 12  # the longest the notebook measures, where attention matters most
    bound: float = 0.3  # exact match at `length`, with attention
    without: float = 0.2  # above the most the model without attention reached at `length` (0.19)
    start: int = 20  # the latest step at which the solution's loss was half a nat below its start


OUTCOME = Outcome()


@dataclass(frozen=True)
class Result:
    accuracy: dict[int, float]  # exact match per length, as seq2seq.exact_match returns it
    losses: list[float]  # the training loss at every step


UNIFORM_LOSS = math.log(seq2seq.VOCAB_SIZE)  # a uniform guess among the tokens: ln 13 = 2.565


def left_start(losses: list[float], window: int = 20, below: float = UNIFORM_LOSS - 0.5) -> int | None:
    """The first step at which the mean loss of the last `window` steps is below `below`."""
    for step in range(window, len(losses) + 1):
        if sum(losses[step - window : step]) / window < below:
            return step
    return None


def measure_outcome(seeds: Iterable[int], attend: Attend | None = None) -> list[tuple[int, float, float, int | None]]:
    """(seed, exact match at OUTCOME.length with attention, the same without, the step the loss
    with attention left its start) of the course's solution per seed: the measurement behind
    OUTCOME. `attend` defaults to dot_product_attention, which is the notebook's solution."""
    attend = attend or (lambda q, k, mask=None: dot_product_attention(q, k, k, mask=mask))
    runs = []
    for seed in seeds:
        plain, yours = train(None, seed=seed), train(attend, seed=seed)
        n = OUTCOME.length
        runs.append((seed, seq2seq.exact_match(yours, [n], n=300)[n], seq2seq.exact_match(plain, [n], n=300)[n],
                     left_start(yours.losses)))
    return runs


def diagnose_learned(result: Result, bound: float = OUTCOME.bound) -> str | None:
    """None when the exact match at OUTCOME.length passes the bound; otherwise "still learning"
    (a shorter run than the notebook's, or a loss that fell but not far enough) or "this will not
    learn" (NaN; the loss flat at its start after the notebook's budget; or the full budget and no
    better than the model without attention, which means attention is not being used)."""
    n = OUTCOME.length
    acc = result.accuracy.get(n, 0.0)
    if acc >= bound:
        return None
    steps = len(result.losses)
    first, last = loss_ends(result.losses)
    if not math.isfinite(last):
        return ("this will not learn: the loss became NaN or infinite. Look at attend: the softmax over "
                "the input tokens, and no division by zero in the scaling.")
    flat = last > first - 0.1
    full = steps >= OUTCOME.steps
    if flat and full:
        return (f"this will not learn: after {steps} steps the loss is still where it started ({last:.3f}); "
                f"the solution's falls within its first {OUTCOME.start} steps. Look at attend: it must "
                "return (context, weights) computed from its inputs, with no .detach() or torch.no_grad().")
    if full and acc <= OUTCOME.without:
        return (f"this will not learn to use attention: at length {n} your model gets {acc:.0%} right, no "
                f"more than the model without attention reached ({OUTCOME.without:.0%} at most). Look at attend: "
                "the weights must come from the scores, decoder_states @ encoder_outputs^T, and the context "
                "must be weights @ encoder_outputs, or the decoder cannot pick out the digit it needs.")
    budget = max(OUTCOME.steps, 2 * steps)
    more = budget - steps if not full else steps
    total = budget if not full else 2 * steps
    return (f"still learning: {acc:.0%} right at length {n} after {steps} steps, below the {bound:.0%} to "
            f"reach, and the loss has fallen ({first:.3f} -> {last:.3f}). Run {more} more steps: "
            f"exercise.train(attend, steps={total}).")


def check_learned(model: seq2seq.Seq2Seq, accuracy: dict[int, float], bound: float = OUTCOME.bound) -> None:
    """`model` as train returned it (with attention), `accuracy` its exact match per length."""
    result = Result(accuracy, list(model.losses))
    n = OUTCOME.length
    problem = diagnose_learned(result, bound)
    if problem:
        raise AttentionCheckError(problem)
    print(f"✓ your model with attention learned: {accuracy[n]:.0%} of the strings of length {n} "
          f"reversed exactly (the bound: {bound:.0%}).")
