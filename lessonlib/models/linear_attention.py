"""Causal linear attention: attention without the softmax, which is an RNN with a matrix state.

    q_t, k_t = Linear(x_t) / sqrt(d_k), Linear(x_t)     (d_k,) each
    v_t      = Linear(x_t)                               (H,)
    S_t      = S_{t-1} + k_t v_t^T                       (d_k, H): the state, S_0 = 0
    out_t    = q_t S_t = sum_{s<=t} (q_t . k_s) v_s      (H,)

The last line is causal attention with the scores q_t . k_s used as they are, without softmax:
the matrix form (Q K^T, masked to s <= t) V computes it for all t at once (forward), and the
recurrence S_t computes it one token at a time with a state of fixed size d_k x H (step), where
softmax attention keeps every k_s and v_s (its KV cache grows with the context). In the one
recurrence h_t = a_t * h_{t-1} + b_t of lessonlib.models.scan, S is h (flattened), a_t = 1 and
b_t = k_t v_t^T (forward_scan).

Feature map: none by default. Katharopoulos et al. (2020) apply phi(x) = elu(x) + 1 to q and k
and divide by phi(q_t) . sum_s phi(k_s), so that the weights are positive and sum to 1 like
softmax's; the plain form leaves both out, so that the model is exactly the formula above (as in
the retention and GLA papers' plain form). The price: nothing bounds S, which grows with every
token; the decay of gated linear attention (lessonlib.models.gated_linear_attention) is the
remedy. The 1/sqrt(d_k) on q is softmax attention's scale, kept so that the scores start near the
same size.

normalised=True is Katharopoulos et al.'s form: phi on the raw q and k (no scale), and each
output divided by its weights' sum. The sum is carried as one more column of the state: the values
get a last entry 1, so S (d_k, H + 1) holds sum_s phi(k_s) v_s^T and, in its last column,
sum_s phi(k_s); out_t = (q_t S_t)[:H] / (q_t S_t)[H]. The parameters are the same either way.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from lessonlib.models.scan import check_last, scan_parallel


def feature_map(x: Tensor) -> Tensor:
    """Katharopoulos et al.'s phi(x) = elu(x) + 1: positive, so every weight phi(q) . phi(k) is."""
    return F.elu(x) + 1


class LinearAttention(nn.Module):
    """x (B, T, I) -> out (B, T, H) and the final state S_T (B, d_k, H), or (B, d_k, H + 1) when
    normalised; single head."""

    def __init__(self, input_size: int, hidden_size: int, key_size: int = 16, normalised: bool = False) -> None:
        super().__init__()
        self.input_size, self.hidden_size, self.key_size = input_size, hidden_size, key_size
        self.normalised = normalised
        self.query = nn.Linear(input_size, key_size, bias=False)
        self.key = nn.Linear(input_size, key_size, bias=False)
        self.value = nn.Linear(input_size, hidden_size, bias=False)

    def qkv(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """x (..., I) -> q, k (..., d_k) and v (..., H); normalised: phi(q), phi(k) and v with a last 1."""
        if self.normalised:
            v = self.value(x)
            return feature_map(self.query(x)), feature_map(self.key(x)), torch.cat([v, torch.ones_like(v[..., :1])], -1)
        return self.query(x) / math.sqrt(self.key_size), self.key(x), self.value(x)

    def read(self, out: Tensor) -> Tensor:
        """What q_t S_t gives -> the output: normalised, the values' part divided by the weights' sum."""
        return out[..., :-1] / out[..., -1:] if self.normalised else out

    def forward(self, x: Tensor, S0: Tensor | None = None, last: int | None = None) -> tuple[Tensor, Tensor]:
        """The parallel (training) form, a masked matrix product: x (B, T, I), S0 (B, d_k, H) or None
        -> out (B, T, H), S_T (B, d_k, H). With `last`, only the last `last` positions come out
        (B, last, H): only their queries enter the scores, (B, last, T), so the operations grow linearly
        in T, not with its square."""
        check_last(last)
        q, k, v = self.qkv(x)  # (B, T, d_k), (B, T, d_k), (B, T, H)
        T = x.shape[1]
        if last is not None:
            q = q[:, -last:]  # (B, T', d_k): the queries wanted, T' = min(last, T)
        scores = q @ k.transpose(1, 2)  # (B, T', T): q_t . k_s
        causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()[T - q.shape[1]:]  # s <= t
        out = scores.masked_fill(~causal, 0) @ v  # (B, T', H)
        S = k.transpose(1, 2) @ v  # (B, d_k, H): sum over all s of k_s v_s^T
        if S0 is not None:  # the state carried in adds q_t S0 to every output
            out = out + q @ S0
            S = S + S0
        return self.read(out), S

    def forward_scan(self, x: Tensor, S0: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """The same, as the recurrence h_t = a_t * h_{t-1} + b_t with h = S flattened, a_t = 1 and
        b_t = k_t v_t^T, in a parallel scan: every S_t is formed, (B, T, d_k, H)."""
        q, k, v = self.qkv(x)
        B, T = x.shape[:2]
        b = (k.unsqueeze(-1) * v.unsqueeze(-2)).reshape(B, T, -1)  # (B, T, d_k * H): k_t v_t^T
        a = torch.ones_like(b)  # nothing decays
        h0 = None if S0 is None else S0.reshape(B, -1)
        S = scan_parallel(a, b, h0).reshape(B, T, self.key_size, v.shape[-1])  # (B, T, d_k, H)
        out = (q.unsqueeze(-2) @ S).squeeze(-2)  # (B, T, H): q_t S_t
        return self.read(out), S[:, -1]

    def step(self, x_t: Tensor, S: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """The recurrent (generation) form: x_t (B, I), S (B, d_k, H) or None (zeros) -> out_t (B, H)
        and the new S. The state's size does not depend on how many tokens came before."""
        q, k, v = self.qkv(x_t)  # (B, d_k), (B, d_k), (B, H)
        if S is None:
            S = x_t.new_zeros(x_t.shape[0], self.key_size, v.shape[-1])
        S = S + k.unsqueeze(-1) * v.unsqueeze(-2)  # (B, d_k, H): add k_t v_t^T
        return self.read((q.unsqueeze(-2) @ S).squeeze(-2)), S  # (B, H)
