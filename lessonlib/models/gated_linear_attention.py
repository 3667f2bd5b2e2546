"""Gated linear attention, simplified: linear attention whose state decays, at a learned,
input-dependent rate per key dimension.

    q_t, k_t, v_t = as in lessonlib.models.linear_attention
    alpha_t       = sigmoid(Linear(x_t))                     (d_k,), each in (0, 1)
    S_t           = diag(alpha_t) S_{t-1} + k_t v_t^T        (d_k, H)
    out_t         = q_t S_t

In the one recurrence h_t = a_t * h_{t-1} + b_t (lessonlib.models.scan), h is S flattened,
a_t is alpha_t repeated along each row of S (H times) and b_t = k_t v_t^T. Row i of S, what the
state holds under key dimension i, fades by alpha_t[i] at each step: the model can keep or
forget, where plain linear attention only adds.

Simplified from GLA (Yang et al., 2024, "Gated Linear Attention Transformers with
Hardware-Efficient Training"): one head; alpha_t from a full-rank Linear, where GLA uses a
low-rank one and raises the sigmoid to the power 1/16 (a temperature that keeps alpha near 1);
no output gate, no normalisation of the output; and training by our plain parallel scan, which
forms every S_t (B, T, d_k, H), where GLA's chunkwise kernel forms S only at chunk boundaries
and uses matrix products within a chunk. The recurrence, and so the model, is the same.

decay_bias sets the gate's bias: +3 starts alpha near sigmoid(3) = 0.95, a state that carries
(about 1/(1 - 0.95) = 20 steps at first; training moves it).
"""
from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from lessonlib.models.scan import scan_parallel


class GatedLinearAttention(nn.Module):
    """x (B, T, I) -> out (B, T, H) and the final state S_T (B, d_k, H); single head."""

    def __init__(self, input_size: int, hidden_size: int, key_size: int = 16, decay_bias: float = 3.0) -> None:
        super().__init__()
        self.input_size, self.hidden_size, self.key_size = input_size, hidden_size, key_size
        self.query = nn.Linear(input_size, key_size, bias=False)
        self.key = nn.Linear(input_size, key_size, bias=False)
        self.value = nn.Linear(input_size, hidden_size, bias=False)
        self.gate = nn.Linear(input_size, key_size)  # alpha's pre-activation
        nn.init.constant_(self.gate.bias, decay_bias)

    def projections(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """x (..., I) -> q, k, alpha (..., d_k) and v (..., H)."""
        q = self.query(x) / math.sqrt(self.key_size)
        return q, self.key(x), torch.sigmoid(self.gate(x)), self.value(x)

    def coefficients(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """x (B, T, I) -> a, b (B, T, d_k * H): S_t = a_t * S_{t-1} + b_t, S flattened row by row."""
        _, k, alpha, v = self.projections(x)
        return self._a_b(k, alpha, v)

    def _a_b(self, k: Tensor, alpha: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        B, T = k.shape[:2]
        a = alpha.unsqueeze(-1).expand(B, T, self.key_size, self.hidden_size)  # row i decays by alpha_t[i]
        b = k.unsqueeze(-1) * v.unsqueeze(-2)  # (B, T, d_k, H): k_t v_t^T
        return a.reshape(B, T, -1), b.reshape(B, T, -1)

    def forward(self, x: Tensor, S0: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """The parallel (training) form: x (B, T, I), S0 (B, d_k, H) or None -> out (B, T, H), S_T."""
        B, T = x.shape[:2]
        q, k, alpha, v = self.projections(x)  # (B, T, d_k) x3, (B, T, H)
        a, b = self._a_b(k, alpha, v)  # (B, T, d_k * H) each
        h0 = None if S0 is None else S0.reshape(B, -1)
        S = scan_parallel(a, b, h0).reshape(B, T, self.key_size, self.hidden_size)  # (B, T, d_k, H)
        out = (q.unsqueeze(-2) @ S).squeeze(-2)  # (B, T, H): q_t S_t
        return out, S[:, -1]

    def step(self, x_t: Tensor, S: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """The recurrent (generation) form: x_t (B, I), S (B, d_k, H) or None (zeros) -> out_t (B, H), S."""
        q, k, alpha, v = self.projections(x_t)  # (B, d_k) x3, (B, H)
        if S is None:
            S = x_t.new_zeros(x_t.shape[0], self.key_size, self.hidden_size)
        S = alpha.unsqueeze(-1) * S + k.unsqueeze(-1) * v.unsqueeze(-2)  # (B, d_k, H)
        return (q.unsqueeze(-2) @ S).squeeze(-2), S
