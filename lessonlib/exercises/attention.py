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
as its attention (or without attention for attend=None), on a budget small enough for a laptop.
"""
from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from lessonlib.models import seq2seq
from lessonlib.models.attention import dot_product_attention

Attend = Callable[[Tensor, Tensor], tuple[Tensor, Tensor]]


class AttentionCheckError(AssertionError):
    """A failed check, shown in a notebook as its message alone (no traceback into lessonlib)."""

    def _render_traceback_(self) -> list[str]:  # IPython shows these lines instead of a traceback
        return [f"✗ {self}"]


# ----------------------------------------------------------------------------- the checker

def _close(a: Tensor, b: Tensor) -> bool:
    return a.shape == b.shape and torch.allclose(a.float(), b.float(), atol=1e-5, rtol=1e-4)


def _call(attend: Attend, q: Tensor, k: Tensor) -> tuple[tuple[Tensor, Tensor] | None, str | None]:
    try:
        out = attend(q, k)
    except NotImplementedError:
        return None, "attend() is still the stub: replace `raise NotImplementedError` with your code."
    except Exception as e:  # the reader's bug, reported in one line
        return None, (f"attend() raised {type(e).__name__}: {e}. It was called with decoder_states of "
                      f"shape {tuple(q.shape)} and encoder_outputs of shape {tuple(k.shape)}.")
    if not (isinstance(out, (tuple, list)) and len(out) == 2
            and all(isinstance(t, Tensor) for t in out)):
        return None, (f"attend() must return two tensors, (context, weights); it returned "
                      f"{type(out).__name__}.")
    return (out[0], out[1]), None


def _diagnose_one(attend: Attend, B: int, T_out: int, T_in: int, H: int, seed: int) -> str | None:
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, T_out, H, generator=g)
    k = torch.randn(B, T_in, H, generator=g)
    shapes = (f"decoder_states {tuple(q.shape)} = (B, T_out, H), "
              f"encoder_outputs {tuple(k.shape)} = (B, T_in, H)")
    out, problem = _call(attend, q.clone(), k.clone())
    if problem:
        return problem
    context, weights = out
    want_c, want_w = dot_product_attention(q, k, k, scale=True)
    c_shape, w_shape = tuple(want_c.shape), tuple(want_w.shape)

    # --- shapes
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

    # --- context: the weighted sum of the encoder outputs
    if not _close(context.detach(), want_c):
        return ("weights are right, but context is not weights @ encoder_outputs, the weighted "
                "sum of the encoder outputs.")

    # --- gradients must reach both inputs, or the model cannot learn through attention
    qg, kg = q.clone().requires_grad_(), k.clone().requires_grad_()
    out, problem = _call(attend, qg, kg)
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


def diagnose(attend: Attend) -> str | None:
    """What is wrong with ``attend``, in plain words, or None if it matches the reference.

    Tried on a batch of several decoder steps (as in training) and on a single step (as in
    greedy decoding, T_out = 1), with T_out != T_in so that a transposed result shows.
    """
    for B, T_out, T_in, H, seed in ((2, 3, 5, 16, 0), (3, 1, 7, 16, 1)):
        problem = _diagnose_one(attend, B, T_out, T_in, H, seed)
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


# ----------------------------------------------------------------------------- training

def train(attend: Attend | None, *, seed: int = 0, steps: int = 800, lr: float = 1e-2,
          min_len: int = 3, max_len: int = 12, hidden: int = 64, cell: str = "gru") -> seq2seq.Seq2Seq:
    """Train lessonlib.models.seq2seq's reverser with ``attend`` as its decoder's attention (None: no
    attention), on a budget small enough for a laptop. The same seed gives the same initial weights
    and batches whatever ``attend`` is, so the two models differ only in attention."""
    return seq2seq.train(attend is not None, seed, steps=steps, lr=lr, min_len=min_len, max_len=max_len,
                         hidden=hidden, cell=cell, attend=attend or seq2seq.luong_attention, progress=False)
