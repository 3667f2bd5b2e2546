"""The one recurrence behind linear attention, minGRU, gated linear attention and selective SSMs:

    h_t = a_t * h_{t-1} + b_t        (elementwise; h_0 given, zeros by default)

computed three ways, each on tensors a, b of shape (B, T, D) and h_0 of shape (B, D), on any device:

- scan_loop: the definition, one step after another.
- scan_parallel: a Hillis-Steele scan. Because a_t does not depend on h, a stretch of steps is
  itself a step of the same form: doing (a1, b1) and then (a2, b2) maps h to
  a2 * (a1 * h + b1) + b2 = (a2 * a1) * h + (a2 * b1 + b2), the pair (a2 * a1, a2 * b1 + b2).
  Combining each step with the one d steps back, for d = 1, 2, 4, ..., every position holds the
  whole prefix after ceil(log2 T) rounds, and within a round every position combines at once.
  Counted by the course's one cost function (lessonlib.experiments.cost.count): 2 + 2 ceil(log2 T)
  sequential steps where the loop takes 2 T, for more work in total, near 3 T log2 T operations
  against the loop's 2 T. Blelloch's scan (lessonlib.exercises.scan.blelloch) brings the work
  back under 3 times the loop's, for about twice the steps; we keep Hillis-Steele as the easier to read.
- scan_log: the same sum in log space, for positive a and b (see its docstring for why).

scan_cumprod is the closed form written naively, kept to show what goes wrong (float32 underflow).
hillis_steele_rounds lists which steps combine in each round (drawn by lessonlib.figures.scan_plots).
"""
from __future__ import annotations

import math

import torch
from torch import Tensor


def _check(a: Tensor, b: Tensor, h0: Tensor | None) -> None:
    if a.dim() != 3 or a.shape != b.shape:
        raise ValueError(f"expected a and b of one shape (B, T, D), got {tuple(a.shape)} and {tuple(b.shape)}")
    if h0 is not None and h0.shape != (a.shape[0], a.shape[2]):
        raise ValueError(f"expected h0 of shape (B, D) = {(a.shape[0], a.shape[2])}, got {tuple(h0.shape)}")


def scan_loop(a: Tensor, b: Tensor, h0: Tensor | None = None) -> Tensor:
    """a, b (B, T, D), h0 (B, D) or None (zeros) -> h (B, T, D): the recurrence, step by step."""
    _check(a, b, h0)
    h = b.new_zeros(b.shape[0], b.shape[2]) if h0 is None else h0  # (B, D)
    hs = []
    for t in range(a.shape[1]):
        h = a[:, t] * h + b[:, t]  # (B, D): one multiply and one add per element
        hs.append(h)
    return torch.stack(hs, dim=1)  # (B, T, D)


def scan_parallel(a: Tensor, b: Tensor, h0: Tensor | None = None) -> Tensor:
    """a, b (B, T, D), h0 (B, D) or None (zeros) -> h (B, T, D): h0 folded in, then ceil(log2 T) rounds.

    After the round with offset d, position t holds the pair (A, B) of the steps t-2d+1..t
    (or 1..t where that reaches the start): applying those steps to any h gives A * h + B.
    h_0 is folded into the first step first, b_1 <- a_1 * h_0 + b_1, so that once a position's
    pair covers steps 1..t, its B is h_t.
    """
    _check(a, b, h0)
    T = a.shape[1]
    if T == 0:
        return b.clone()
    if h0 is None:
        h0 = b.new_zeros(b.shape[0], b.shape[2])  # folded in all the same: the work does not depend on h0
    B_ = torch.cat([(a[:, 0] * h0 + b[:, 0]).unsqueeze(1), b[:, 1:]], dim=1)  # (B, T, D)
    A_ = a  # (B, T, D)
    d = 1
    while d < T:
        # position t (t >= d) combines with position t - d: first the earlier pair, then its own
        #   (A, B)[t] <- (A[t] * A[t-d], A[t] * B[t-d] + B[t]);  positions t < d are finished
        A_, B_ = (
            torch.cat([A_[:, :d], A_[:, d:] * A_[:, :-d]], dim=1),
            torch.cat([B_[:, :d], A_[:, d:] * B_[:, :-d] + B_[:, d:]], dim=1),
        )
        d *= 2
    return B_  # (B, T, D): B at position t is h_t


def check_last(last: int | None) -> None:
    """`last`, the number of final positions a layer computes, is None (all) or at least 1."""
    if last is not None and last < 1:
        raise ValueError(f"last must be at least 1 (or None for every position), got {last}")


def scan_log(log_a: Tensor, log_b: Tensor, log_h0: Tensor | None = None, last: int | None = None) -> Tensor:
    """log_a, log_b (B, T, D), log_h0 (B, D) or None (h_0 = 0) -> log h (B, T, D), for positive a and b;
    with `last`, only the last `last` positions (B, last, D).

    Unrolled, the recurrence is a weighted sum: with a*_t = log a_1 + ... + log a_t,

        h_t = sum_{s<=t} exp(a*_t - a*_s) b_s  +  exp(a*_t) h_0
        log h_t = a*_t + logcumsumexp_s(log b_s - a*_s)       (h_0 joins as s = 0, with a*_0 = 0)

    one cumsum and one logcumsumexp, both parallel scans inside torch. This is the form of
    minGRU's reference code (Feng et al., 2024, after Heinsen, 2023).

    Numerics. The product a_1 ... a_t of many factors below 1 is tiny: 0.5 ** 200 (6e-61) is
    below float32's smallest positive number (1.4e-45) and rounds to 0, so the naive closed form
    (scan_cumprod), which divides by that product, gets b / 0 = inf and then 0 * inf = nan. In
    log space the product is the sum a*_t, which for 0.5 ** 200 is only -139; logcumsumexp
    subtracts the running maximum before it exponentiates, so it neither over- nor underflows,
    and adding a*_t afterwards forms each weight exp(a*_t - a*_s) from a difference of logs,
    never from the tiny products themselves. What
    remains is rounding: a*_t grows like t, and in float32 a sum near -1,000 carries an absolute
    error of about 1e-4, which becomes a relative error of about 1e-4 in h. The log space also
    needs b > 0 (minGRU ensures it with its function g); a b of either sign would need two such
    scans (its positive and negative parts) or complex logarithms, which we do not write.

    `last`: a model that reads only its final state (the memory task's classifier) needs no
    cumulative scan. Each of the last positions is the sum above as one logsumexp over its
    prefix, which costs a few elementwise passes where logcumsumexp, and above all its backward,
    costs many more; the same sums, as safe from under- and overflow.
    """
    if log_a.dim() != 3 or log_a.shape != log_b.shape:
        raise ValueError(f"expected log_a and log_b of one shape (B, T, D), got {tuple(log_a.shape)} "
                         f"and {tuple(log_b.shape)}")
    check_last(last)
    last = None if last is None else min(last, log_a.shape[1])  # positions wanted, h_0 never among them
    if log_h0 is not None:  # h_0 as step 0: log a_0 = 0, b_0 = h_0
        log_a = torch.cat([torch.zeros_like(log_h0).unsqueeze(1), log_a], dim=1)  # (B, T+1, D)
        log_b = torch.cat([log_h0.unsqueeze(1), log_b], dim=1)  # (B, T+1, D)
    a_star = torch.cumsum(log_a, dim=1)  # (B, T(+1), D): log of a_1 ... a_t
    if last is not None:
        return _log_sums_at_the_end(a_star, log_b - a_star, last)
    log_h = a_star + torch.logcumsumexp(log_b - a_star, dim=1)  # (B, T(+1), D)
    return log_h if log_h0 is None else log_h[:, 1:]


def _log_sums_at_the_end(a_star: Tensor, terms: Tensor, last: int) -> Tensor:
    """log h_t = a*_t + logsumexp_{s<=t} terms_s for the last `last` positions t: (B, last, D)."""
    T = terms.shape[1]
    t = torch.arange(T - last, T, device=terms.device)  # the positions wanted
    future = torch.arange(T, device=terms.device) > t.unsqueeze(1)  # (last, T): s > t, left out
    masked = terms.unsqueeze(1).masked_fill(future.unsqueeze(-1), -math.inf)  # (B, last, T, D)
    return a_star[:, -last:] + torch.logsumexp(masked, dim=2)  # (B, last, D)


def scan_cumprod(a: Tensor, b: Tensor, h0: Tensor | None = None) -> Tensor:
    """The closed form computed naively, h_t = P_t (h_0 + sum_{s<=t} b_s / P_s) with P_t = a_1 ... a_t:
    correct in exact arithmetic, and parallel (a cumprod and a cumsum), but P_t underflows to 0
    once many a_t < 1 have been multiplied, and then h is nan or inf. Shown, not used; see scan_log."""
    _check(a, b, h0)
    P = torch.cumprod(a, dim=1)  # (B, T, D)
    h0 = b.new_zeros(b.shape[0], b.shape[2]) if h0 is None else h0
    return P * (h0.unsqueeze(1) + torch.cumsum(b / P, dim=1))


def hillis_steele_rounds(T: int) -> list[list[tuple[int, int]]]:
    """For each round of scan_parallel, the pairs (t, t - d) that combine, positions 0-based."""
    rounds, d = [], 1
    while d < T:
        rounds.append([(t, t - d) for t in range(d, T)])
        d *= 2
    return rounds
