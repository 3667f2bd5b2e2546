"""The delta rule: a matrix state that edits what it stores, where linear attention only adds.

    S_t = S_{t-1} + beta_t k_t (v_t - S_{t-1}^T k_t)^T      (d_k, d_v) per head, S_0 = 0 by default
        = (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T
    o_t = S_t^T q_t                                          (d_v,)

S_{t-1}^T k_t is what the state returns for k_t now; the write adds the difference between the
value wanted and that (the "delta", as in the Widrow-Hoff rule): with beta_t = 1 and a unit key,
the state returns exactly v_t for k_t afterwards, where linear attention (S + k v^T) returns old
+ new. Keys are L2-normalised by the layer (lessonlib.models.deltanet), because with ||k|| = 1 and
beta in (0, 1), I - beta k k^T is a contraction along k: it scales S's component along k by
1 - beta and leaves the rest, so it never enlarges S, and what S returns for k moves from its old
value towards v without overshooting. With any other key the factor is 1 - beta ||k||^2: it
overshoots (changes sign) once beta ||k||^2 > 1 and grows once beta ||k||^2 > 2.

Gated (Gated DeltaNet, Yang, Kautz and Hatamizadeh, arXiv:2412.06464): a decay alpha_t in [0, 1]
in front, S_t = alpha_t (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T; alpha_t = 0 forgets all.

Two ways to compute it, equal up to rounding (tests/test_delta_rule.py):
- delta_rule_loop: the definition, one token after another (a loop of T iterations);
- delta_rule_chunkwise: Yang et al.'s chunkwise form (arXiv:2406.06484). Within a chunk of C
  tokens, the writes delta_i = beta_i (v_i - alpha_i S_{i-1}^T k_i) solve one unit lower-triangular
  system (the UT/WY transform), so S_{i-1} is never formed inside a chunk: matrix products over
  the chunk, and a loop of T / C iterations that hands the state from chunk to chunk.
Every tensor is (B, H, T, d): batch, heads, time, features; beta and alpha are (B, H, T).
"""
from __future__ import annotations

import torch
from torch import Tensor
from torch.nn import functional as F


def delta_rule_step(S: Tensor, k: Tensor, v: Tensor, beta: Tensor, alpha: Tensor | None = None) -> Tensor:
    """One write: S (..., d_k, d_v), k (..., d_k), v (..., d_v), beta, alpha (...) -> the new S."""
    if alpha is not None:
        S = alpha[..., None, None] * S  # alpha (I - b k k^T) S = (I - b k k^T) (alpha S)
    old = torch.einsum("...kv,...k->...v", S, k)  # S^T k: what the state returns for k now
    return S + (beta[..., None] * k)[..., :, None] * (v - old)[..., None, :]  # + beta k (v - old)^T


def delta_rule_loop(
    q: Tensor, k: Tensor, v: Tensor, beta: Tensor, alpha: Tensor | None = None, state: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """q, k (B, H, T, d_k), v (B, H, T, d_v), beta, alpha (B, H, T), state (B, H, d_k, d_v) or None
    -> o (B, H, T, d_v) and the final state S_T (B, H, d_k, d_v): one token at a time."""
    B, H, T, d_k = k.shape
    S = k.new_zeros(B, H, d_k, v.shape[-1]) if state is None else state
    outs = []
    for t in range(T):
        a_t = None if alpha is None else alpha[:, :, t]
        S = delta_rule_step(S, k[:, :, t], v[:, :, t], beta[:, :, t], a_t)  # (B, H, d_k, d_v)
        outs.append(torch.einsum("bhkv,bhk->bhv", S, q[:, :, t]))  # o_t = S_t^T q_t
    return torch.stack(outs, 2), S  # (B, H, T, d_v)


def segment_decay(log_alpha: Tensor) -> Tensor:
    """log_alpha (..., C) -> G (..., C, C): G[t, j] = alpha_{j+1} ... alpha_t for j <= t (1 on the
    diagonal), 0 above it. A cumulative sum down each column (Mamba-2's segsum), not a difference of
    cumulative sums, so alpha = 0 (log -inf) gives exact zeros and never -inf - (-inf)."""
    C = log_alpha.shape[-1]
    ones = torch.ones(C, C, dtype=torch.bool, device=log_alpha.device)
    x = log_alpha[..., :, None].expand(*log_alpha.shape, C).masked_fill(~ones.tril(-1), 0)  # [t, j]: log alpha_t, t > j
    return x.cumsum(-2).exp().masked_fill(~ones.tril(), 0)  # [t, j]: sum of log alpha_i over j < i <= t


def delta_rule_chunkwise(
    q: Tensor, k: Tensor, v: Tensor, beta: Tensor, alpha: Tensor | None = None,
    chunk_size: int = 32, state: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """The same as delta_rule_loop (same arguments, same results), a chunk of C tokens at a time.

    In a chunk starting from state S, with g_t = alpha_1 ... alpha_t (from the chunk's start) and
    G[t, j] = g_t / g_j (segment_decay; all ones without a gate), unrolling the recurrence gives
        S_t = g_t S + sum_{i<=t} G[t, i] k_i delta_i^T,
        delta_t + beta_t sum_{j<t} G[t, j] (k_t . k_j) delta_j = beta_t (v_t - g_t S^T k_t),
    that is (I + A) Delta = diag(beta) (V - diag(g) K S) with A = tril(diag(beta) (K K^T * G), -1).
    So Delta = U - W S with T_ = (I + A)^{-1} diag(beta), W = T_ diag(g) K, U = T_ V (one
    triangular solve per chunk, independent of S), and then, per chunk in turn,
        O = diag(g) Q S + (Q K^T * G) Delta,       S <- g_C S + (diag(G[C, :]) K)^T Delta.
    The decays go through log alpha: alpha = 0 exactly gives exact outputs and states, but a NaN
    gradient for that alpha (the loop's is finite); a sigmoid gate is 0 only where it underflows.
    """
    B, H, T, d_k = k.shape
    d_v = v.shape[-1]
    C = chunk_size
    n = -(-T // C)  # chunks, the last one padded
    pad = n * C - T  # padded tokens: k = 0 and beta = 0 write nothing, alpha = 1 keeps; their o is cut
    q, k, v = (F.pad(x, (0, 0, 0, pad)).reshape(B, H, n, C, -1) for x in (q, k, v))  # (B, H, n, C, d)
    beta = F.pad(beta, (0, pad)).reshape(B, H, n, C)
    log_alpha = torch.zeros_like(beta) if alpha is None else F.pad(alpha, (0, pad), value=1.0).reshape(B, H, n, C).log()
    G = segment_decay(log_alpha)  # (B, H, n, C, C): decay from j to t, causal (0 above the diagonal)
    g = log_alpha.cumsum(-1).exp()[..., None]  # (B, H, n, C, 1): decay from the chunk's start to t
    to_end = G[..., -1, :, None]  # (B, H, n, C, 1): decay from t to the chunk's end

    # the UT/WY transform, all chunks at once: solve (I + A) [W U] = diag(beta) [diag(g) K, V]
    A = (beta[..., None] * (k @ k.transpose(-1, -2)) * G).tril(-1)  # (B, H, n, C, C), strictly lower
    eye = torch.eye(C, dtype=k.dtype, device=k.device)
    WU = torch.linalg.solve_triangular(eye + A, beta[..., None] * torch.cat([g * k, v], -1), upper=False)
    W, U = WU.split([d_k, d_v], -1)  # (B, H, n, C, d_k), (B, H, n, C, d_v)
    scores = (q @ k.transpose(-1, -2)) * G  # (B, H, n, C, C): q_t . k_i, decayed, i <= t

    S = k.new_zeros(B, H, d_k, d_v) if state is None else state  # (B, H, d_k, d_v)
    outs = []
    for c in range(n):  # the only loop over the sequence: n = T / C iterations
        delta = U[:, :, c] - W[:, :, c] @ S  # (B, H, C, d_v): the writes, given the state coming in
        outs.append((g[:, :, c] * q[:, :, c]) @ S + scores[:, :, c] @ delta)  # (B, H, C, d_v)
        S = g[:, :, c, -1:] * S + (to_end[:, :, c] * k[:, :, c]).transpose(-1, -2) @ delta
    return torch.cat(outs, 2)[:, :, :T], S  # (B, H, T, d_v), (B, H, d_k, d_v)
