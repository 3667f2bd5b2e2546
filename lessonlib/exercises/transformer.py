"""Support code for the exercise notebook docs/lessons/exercise-transformer.ipynb.

The reader writes four functions (a `Parts`):

    causal_mask(L) -> (L, L) bool, True where query i may attend to key j, that is j <= i
    masked_attention(q, k, v, mask) -> (context, weights)
        q, k, v (..., L, d); mask broadcastable to (..., L, L), True: may attend
        weights = softmax((q @ k^T / sqrt(d)) with -inf where ~mask), context = weights @ v
    split_heads(x, heads)  (B, L, d) -> (B, heads, L, d / heads), head h = features h*d/heads ...
    merge_heads(x)         (B, heads, L, d_head) -> (B, L, heads * d_head), the inverse

`check_mask`, `check_attention` and `check_heads` compare each with lessonlib's reference
(lessonlib.models.multihead, lessonlib.models.attention) and say in plain words what is wrong;
`check_assembled` runs all four as multi-head self-attention against nn.MultiheadAttention.
The `diagnose_*` functions return the message (None when all is well), for tests.
`train(parts, causal=...)` trains the lesson's Caesar model (lessonlib.experiments.caesar) with
the reader's functions inside every block, and `check_learned` judges the masked model's outcome
against OUTCOME.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from lessonlib import memo
from lessonlib.exercises.attention import AttentionCheckError
from lessonlib.exercises.calls import call, loss_ends
from lessonlib.experiments import caesar
from lessonlib.models.attention import dot_product_attention
from lessonlib.models.multihead import MultiHeadAttention, causal_mask, merge_heads, split_heads


class Parts(NamedTuple):
    causal_mask: Callable[[int], Tensor]
    masked_attention: Callable[[Tensor, Tensor, Tensor, Tensor], tuple[Tensor, Tensor]]
    split_heads: Callable[[Tensor, int], Tensor]
    merge_heads: Callable[[Tensor], Tensor]


REFERENCE = Parts(causal_mask, lambda q, k, v, mask: dot_product_attention(q, k, v, mask=mask),
                  split_heads, merge_heads)


def _close(a: Tensor, b: Tensor) -> bool:
    return a.shape == b.shape and torch.allclose(a.double(), b.double(), atol=1e-6, rtol=1e-5)


# ----------------------------------------------------------------------------- the causal mask

def diagnose_mask(causal_mask_fn: Callable[[int], Tensor]) -> str | None:
    for L in (5, 1, 8):
        mask, problem = call("causal_mask", causal_mask_fn, L)
        if problem:
            return problem
        want = causal_mask(L)
        if not isinstance(mask, Tensor):
            return f"causal_mask({L}) must return a tensor, not {type(mask).__name__}."
        if mask.shape != want.shape:
            return f"causal_mask({L}) should have shape {tuple(want.shape)} = (L, L), not {tuple(mask.shape)}."
        if mask.dtype != torch.bool:
            return (f"causal_mask must be boolean (True: may attend), not {mask.dtype}: "
                    f"torch.ones(L, L, dtype=torch.bool).tril() is one way.")
        if torch.equal(mask, want):
            continue
        if torch.equal(mask, ~want):
            return ("your mask is inverted: it is True above the diagonal (the future) and False on "
                    "and below it. True must mean 'may attend': query i sees keys j <= i.")
        if torch.equal(mask, want & ~torch.eye(L, dtype=torch.bool)):
            return ("your mask hides the diagonal: a position must see itself, or position 0 sees "
                    "nothing at all and its softmax is NaN. Use .tril() (diagonal 0), not .tril(-1).")
        if torch.equal(mask, want.T):
            return "your mask is transposed: row i is query i, and it may see keys j <= i (lower triangle)."
        return f"causal_mask({L}) should be the lower triangle, diagonal included:\n{want.int()}\nyours:\n{mask.int()}"
    return None


# ----------------------------------------------------------------------------- masked attention

def _attention_inputs(seed: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(2, 3, 6, 8, generator=g, dtype=torch.float64) for _ in range(3))  # (B, heads, L, d)
    mask = causal_mask(6).clone()
    mask[4, 1] = False  # not only the causal pattern: the function must follow the mask it is given
    return q, k, v, mask


def diagnose_attention(masked_attention: Callable) -> str | None:
    q, k, v, mask = _attention_inputs(0)
    out, problem = call("masked_attention", masked_attention, q.clone(), k.clone(), v.clone(), mask.clone())
    if problem:
        return problem
    if not (isinstance(out, (tuple, list)) and len(out) == 2 and all(isinstance(t, Tensor) for t in out)):
        return "masked_attention() must return two tensors, (context, weights)."
    context, weights = out
    want_c, want_w = dot_product_attention(q, k, v, mask=mask)
    if weights.shape != want_w.shape or context.shape != want_c.shape:
        return (f"for q, k, v of shape {tuple(q.shape)} = (B, heads, L, d), weights should be "
                f"{tuple(want_w.shape)} and context {tuple(want_c.shape)}; yours are "
                f"{tuple(weights.shape)} and {tuple(context.shape)}.")
    w = weights.detach()
    if torch.isnan(w).any():
        return ("weights contain NaN: some row has no key left to attend to. Did you hide the "
                "allowed positions? mask is True where attending is allowed: fill the scores where ~mask.")
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if _close(w, scores.softmax(-1) * mask):
        return ("you applied the mask after the softmax: the hidden weights are 0, but the rows no "
                "longer sum to 1, so each position reads a shrunken mix. Fill the scores with "
                "float('-inf') where ~mask before the softmax.")
    if _close(w, scores.softmax(-1)):
        return "the mask is ignored: hidden positions still get weight. Fill their scores with float('-inf')."
    if _close(w, scores.masked_fill(~mask, 0.0).softmax(-1)):
        return ("a score of 0 does not hide a position: exp(0) = 1, so it keeps weight. Fill hidden "
                "scores with float('-inf'), whose exp is exactly 0.")
    if _close(w, (q @ k.transpose(-2, -1)).masked_fill(~mask, float("-inf")).softmax(-1)):
        return f"missing scaling: divide the scores by sqrt(d) = {math.sqrt(q.shape[-1]):g} before the softmax."
    if _close(w, dot_product_attention(q, k, v, causal=True)[1]):
        return ("your function builds its own causal mask instead of using the `mask` argument: "
                "use the mask it is given (masks are not always causal; padding is one example).")
    if not _close(w, want_w):
        return f"weights differ from the masked softmax by up to {(w - want_w).abs().max().item():.3g}."
    if not _close(context.detach(), want_c):
        return "the weights are right, but context is not weights @ v."
    qg = q.clone().requires_grad_()
    out, problem = call("masked_attention", masked_attention, qg, k, v, mask)
    if problem:
        return problem
    if not out[0].requires_grad:
        return "context carries no gradient: do not detach or use torch.no_grad(); the model learns through it."
    return None


# ----------------------------------------------------------------------------- heads

def diagnose_heads(split_heads_fn: Callable[[Tensor, int], Tensor],
                   merge_heads_fn: Callable[[Tensor], Tensor]) -> str | None:
    B, L, d, heads = 2, 5, 12, 3
    x = torch.arange(B * L * d, dtype=torch.float64).view(B, L, d)  # every number tells where it came from
    split, problem = call("split_heads", split_heads_fn, x.clone(), heads)
    if problem:
        return problem
    want = split_heads(x, heads)
    if not isinstance(split, Tensor) or split.shape != want.shape:
        got = tuple(split.shape) if isinstance(split, Tensor) else type(split).__name__
        if got == (B, L, heads, d // heads):
            return (f"split_heads returns {got} = (B, L, heads, d_head): move the heads axis in "
                    f"front of the positions with .transpose(1, 2), to {tuple(want.shape)}.")
        return (f"split_heads(x, {heads}) for x of shape {(B, L, d)} should return {tuple(want.shape)} "
                f"= (B, heads, L, d/heads), not {got}.")
    if not torch.equal(split, want):
        if torch.equal(split, x.view(B, L, d // heads, heads).permute(0, 3, 1, 2)):
            return ("split_heads deals the features out like cards (head 0 gets features 0, 3, 6, ...); "
                    "each head must get a contiguous block: view(B, L, heads, d // heads).")
        if torch.equal(split, x.reshape(B, heads, L, d // heads)):
            return ("split_heads reshapes straight to (B, heads, L, d_head), which cuts across positions: "
                    "a head then mixes numbers of different positions. view(B, L, heads, d_head) first, "
                    "then transpose(1, 2).")
        return ("split_heads has the right shape but puts the wrong numbers in each head: "
                "head h must hold features h*d_head to (h+1)*d_head - 1.")

    merged, problem = call("merge_heads", merge_heads_fn, want.clone())
    if problem:
        return problem
    if not isinstance(merged, Tensor) or merged.shape != x.shape:
        got = tuple(merged.shape) if isinstance(merged, Tensor) else type(merged).__name__
        return f"merge_heads should return {tuple(x.shape)} = (B, L, heads * d_head), not {got}."
    if not torch.equal(merged, x):
        if torch.equal(merged, want.permute(0, 2, 3, 1).reshape(B, L, d)):
            return ("merge_heads is transposed: it interleaves the heads' features (feature 0 of "
                    "every head, then feature 1, ...) instead of putting head 0's block first. "
                    "Use transpose(1, 2), so the axes are (B, L, heads, d_head), then reshape.")
        if torch.equal(merged, want.reshape(B, L, d)):
            return ("merge_heads reshapes (B, heads, L, d_head) straight to (B, L, d), which mixes "
                    "positions: transpose(1, 2) first, so the heads sit next to their features.")
        return "merge_heads(split_heads(x)) must give back x; yours rearranges the numbers."
    return None


# ----------------------------------------------------------------------------- all four together

class ReaderAttention(nn.Module):
    """Multi-head self-attention computed with the reader's parts, on the weights of `layer`."""

    def __init__(self, layer: MultiHeadAttention, parts: Parts) -> None:
        super().__init__()
        self.layer, self.parts = layer, parts

    def forward(self, x: Tensor, *, causal: bool = False, key_padding_mask: Tensor | None = None,
                cache: object = None, need_weights: bool = False, last: int | None = None) -> tuple[Tensor, Tensor]:
        if key_padding_mask is not None or cache is not None or last is not None:
            raise ValueError("the exercise's attention takes no padding mask and no cache, and computes every position")
        p, layer, L = self.parts, self.layer, x.shape[1]
        q, k, v = F.linear(x, layer.in_proj_weight, layer.in_proj_bias).chunk(3, dim=-1)  # (B, L, d) each
        q, k, v = (p.split_heads(t, layer.heads) for t in (q, k, v))  # (B, heads, L, d_head)
        mask = p.causal_mask(L) if causal else torch.ones(L, L, dtype=torch.bool)
        context, weights = p.masked_attention(q, k, v, mask.to(x.device))
        return layer.out_proj(p.merge_heads(context)), weights


def diagnose_assembled(parts: Parts) -> str | None:
    """All four parts as causal multi-head self-attention, against nn.MultiheadAttention."""
    for problem in (diagnose_mask(parts.causal_mask), diagnose_attention(parts.masked_attention),
                    diagnose_heads(parts.split_heads, parts.merge_heads)):
        if problem:
            return problem
    torch.manual_seed(0)
    ref = nn.MultiheadAttention(16, 4, batch_first=True, dtype=torch.float64)
    layer = MultiHeadAttention(16, 4, dtype=torch.float64)
    layer.load_state_dict(ref.state_dict())
    x = torch.randn(2, 7, 16, dtype=torch.float64)
    out, _ = ReaderAttention(layer, parts)(x, causal=True)
    want, _ = ref(x, x, x, attn_mask=~causal_mask(7))
    if not _close(out.detach(), want.detach()):
        gap = (out - want).abs().max().item()
        return f"each part passes, but together they differ from nn.MultiheadAttention by {gap:.3g}."
    return None


def _check(problem: str | None, success: str) -> None:
    if problem:
        raise AttentionCheckError(problem)
    print(f"✓ {success}")


def check_mask(causal_mask_fn: Callable[[int], Tensor]) -> None:
    _check(diagnose_mask(causal_mask_fn), "causal_mask is the lower triangle, diagonal included.")


def check_attention(masked_attention: Callable) -> None:
    _check(diagnose_attention(masked_attention),
           "masked_attention matches the reference: mask before the softmax, scaling, context, gradient.")


def check_heads(split_heads_fn: Callable, merge_heads_fn: Callable) -> None:
    _check(diagnose_heads(split_heads_fn, merge_heads_fn),
           "split_heads gives each head a contiguous block of features, and merge_heads undoes it.")


def check_assembled(parts: Parts) -> None:
    _check(diagnose_assembled(parts),
           "your four functions, assembled, compute the same as torch's nn.MultiheadAttention (causal).")


# ----------------------------------------------------------------------------- training

@memo
def train(parts: Parts, *, causal: bool, seed: int = 1, steps: int = 600) -> caesar.Trained:
    """The lesson's Caesar model, with the reader's parts in every block, with or without the mask.
    A shorter budget than the lesson's; the same seed gives the same weights and batches either way."""
    protocol = caesar.CaesarProtocol(steps=steps)

    def use_parts(layer: MultiHeadAttention) -> nn.Module:
        return ReaderAttention(layer, parts)

    return caesar.train(causal, seed, protocol, progress=False, attention=use_parts)


# ----------------------------------------------------------------------------- the outcome


@dataclass(frozen=True)
class Outcome:
    """The notebook's masked run and the bound its ciphertexts must pass.

    Where the numbers come from: the course's solution (REFERENCE, the same functions as the
    notebook's published solutions) trained by train(causal=True) for 600 steps (the notebook's
    run) and again for 1,500, seeds 0-9, on a shared 2-core machine (the first 600 steps of the
    long runs were the same, bit for bit). The measure is the notebook's: the share of the 500
    held-out ciphertexts that the model writes exactly right, caesar.generation's "exact".
        seed               0     1     2     3     4     5     6     7     8     9
        600 steps          0.000 0.988 0.150 0.006 0.098 0.098 0.108 1.000 0.000 0.090
        1,500 steps        0.086 1.000 1.000 0.004 0.118 0.090 1.000 1.000 0.004 1.000
        left the plateau   506   286   294   277   244   237   346   281   313   343
        near the floor     -     419   642   -     -     -     861   469   -     661
    The loss falls from ln 11 to a plateau at 2.17 within about 50 steps (the ciphertext guessed
    at chance: PLATEAU_LOSS), stays there, and its 20-step mean goes below 2.10 at the step in
    "left the plateau". Then it falls to the floor, 1.08 (within 0.05: "near the floor"), where
    the ciphertexts come out right; or it stops on the way for a long time: seeds 0, 4 and 5 sat
    at 1.22 (one ciphertext position in eight still wrong) and seeds 3 and 8 higher, still at
    step 1,500. So the task is learned by 600 steps on a few seeds only, among them the
    notebook's seed 1, and
    - steps = 600, seed = 1, the notebook's run, which wrote 98.8% of the ciphertexts right;
    - bound = 0.9: 0.09 below the notebook's run, a margin for other CPUs and thread counts;
      a model stopped on the way writes 15% or fewer;
    - plateau = 506, the latest any seed left the plateau (seed 0);
    - enough = 1,200: 2.4 times that, and past the latest step a passing seed neared the floor
      (861); a loss still on the plateau after it is no longer a slow start.
    Each 600-step run took 9-16 s, each 1,500-step run 24-40 s.
    `measure_outcome(range(10))` measures it again.
    """

    steps: int = 600  # the notebook's run: train's default budget, seed 1
    seed: int = 1
    bound: float = 0.9  # ciphertexts written exactly right, of caesar.generation's 500 held-out sequences
    plateau: int = 506  # the latest step at which a seed left the plateau (seed 0)
    enough: int = 1200  # a budget after which a loss still on the plateau means something is wrong


OUTCOME = Outcome()
FLOOR = caesar.loss_floor()  # the plaintext digits cannot be predicted: 1.08
PLATEAU_LOSS = 2 * FLOOR  # the ciphertext digits guessed at chance as well: 2.17


@dataclass(frozen=True)
class Result:
    exact: float  # the share of caesar.generation's 500 held-out ciphertexts written exactly right
    losses: list[float]


def outcome(run: caesar.Trained) -> Result:
    return Result(caesar.generation(run.model, n=500)["exact"], run.losses)


def left_plateau(losses: list[float], window: int = 20, below: float = PLATEAU_LOSS - 0.07) -> int | None:
    """The first step at which the mean loss of the last `window` steps is below `below`."""
    for step in range(window, len(losses) + 1):
        if sum(losses[step - window : step]) / window < below:
            return step
    return None


def measure_outcome(seeds: Iterable[int], steps: int = OUTCOME.steps) -> list[tuple[int, float, int | None]]:
    """(seed, ciphertexts written right, the step its loss left the plateau) of the course's
    solution with the mask, per seed: the measurement behind OUTCOME."""
    runs = []
    for seed in seeds:
        run = train(REFERENCE, causal=True, seed=seed, steps=steps)
        runs.append((seed, outcome(run).exact, left_plateau(run.losses)))
    return runs


def diagnose_learned(result: Result, bound: float = OUTCOME.bound) -> str | None:
    """None when the masked model writes enough ciphertexts right; otherwise "still learning"
    (the loss has left the plateau, or the run was shorter than OUTCOME.enough, within which the
    solution leaves it on every seed measured) or "this will not learn" (the loss NaN, below the
    floor, or still on the plateau after OUTCOME.enough steps)."""
    if result.exact >= bound:
        return None
    steps = len(result.losses)
    _, last = loss_ends(result.losses)
    if not math.isfinite(last):
        return ("this will not learn: the loss became NaN or infinite. Look at causal_mask: a position "
                "that may attend to nothing (no True in its row, as with .tril(-1) at position 0) makes "
                "its softmax NaN.")
    if last < FLOOR - 0.1:
        return (f"this will not learn to write: the training loss {last:.3f} is below {FLOOR:.3f}, the least "
                "a model that cannot see the future can reach, so the model reads the token it must predict. "
                "Look at causal_mask (True only where j <= i) and at how masked_attention uses the mask.")
    flat = last > PLATEAU_LOSS - 0.07
    if flat and steps >= OUTCOME.enough:
        return (f"this will not learn: after {steps} steps the loss is still {last:.3f}, on the plateau where "
                f"the ciphertext is guessed at chance ({PLATEAU_LOSS:.2f}); the solution leaves it by step "
                f"{OUTCOME.plateau} on every seed we tried. Look at how a ciphertext position reaches the key "
                "and its plaintext digit: the mask must let query i see every key j <= i, and split_heads and "
                "merge_heads must keep each position's features together.")
    if flat:
        return (f"still learning: after {steps} steps the loss is {last:.3f}, on the plateau where the ciphertext "
                f"is guessed at chance ({PLATEAU_LOSS:.2f}); the solution stays there for up to "
                f"{OUTCOME.plateau} steps on some seeds before it falls. Run {OUTCOME.enough - steps} more steps: "
                f"exercise.train(parts, causal=True, steps={OUTCOME.enough}).")
    more = max(steps, 600)
    return (f"still learning: {result.exact:.0%} of the ciphertexts written right after {steps} steps, below "
            f"the {bound:.0%} to reach, and the loss has left the plateau ({last:.3f}; the floor is "
            f"{FLOOR:.3f}). Run {more} more steps: exercise.train(parts, causal=True, steps={steps + more}). "
            "The solution, too, stops on the way for over a thousand steps on some seeds; if the loss "
            "does not move, train with another seed as well, e.g. seed=7.")


def check_learned(run: caesar.Trained | Result, bound: float = OUTCOME.bound) -> None:
    """Judge the masked model: `run` as train returned it (its ciphertexts are written here), or
    its Result."""
    result = run if isinstance(run, Result) else outcome(run)
    _check(diagnose_learned(result, bound),
           f"your masked model writes {result.exact:.1%} of the held-out ciphertexts exactly right "
           f"(the bound: {bound:.0%}).")
