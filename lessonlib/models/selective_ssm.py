"""A selective state-space layer, simplified from Mamba (Gu and Dao, 2023): a diagonal recurrence
whose decay depends on the input.

    u_t     = Linear(x_t)                                   (D,): D channels, D = hidden_size
    delta_t = softplus(Linear(u_t) + dt_bias)               (D,): a step size per channel, > 0
    B_t, C_t = Linear(u_t), Linear(u_t)                     (N,) each: what to write, what to read
    A       = -exp(A_log)                                   (D, N), fixed per model, < 0
    h_t[d, n] = exp(delta_t[d] A[d, n]) h_{t-1}[d, n] + delta_t[d] B_t[n] u_t[d]
    y_t[d]    = sum_n C_t[n] h_t[d, n] + D_skip[d] u_t[d]

Each channel d carries N numbers. In the one recurrence h_t = a_t * h_{t-1} + b_t
(lessonlib.models.scan), h is the (D, N) state flattened, a_t = exp(delta_t A) in (0, 1) and
b_t = delta_t B_t u_t. "Selective": delta_t, B_t and C_t read the input, so a token can be let
in (large delta: forget the old, write the new) or passed over (small delta: a near 1, b near 0).

Kept from Mamba: the discretisation a = exp(delta A) (zero-order hold) with b = delta B u (the
simpler Euler rule for B that Mamba's code also uses), A's initialisation A[d, n] = -(n + 1)
(S4D-real), delta's bias drawn so that delta starts log-uniform in [dt_min, dt_max], and the skip
term D_skip u. Left out: the depthwise causal convolution before the SSM, the SiLU activations
and the multiplicative gate branch (y * silu(z)), the expansion factor and the output projection
of a Mamba block, delta's low-rank projection, multiple layers, and the hardware-aware scan
kernel (ours is scan_parallel, which forms every state: (B, T, D, N)).

The decay starts open: with delta near 0.001-0.1, a = exp(-delta (n + 1)) is close to 1 for the
first state dimensions, and dt_max sets how open (smaller: longer memory at the start).
"""
from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from lessonlib.models.scan import scan_parallel


class SelectiveSSM(nn.Module):
    """x (B, T, I) -> out (B, T, H) and the final state (B, H, N)."""

    def __init__(self, input_size: int, hidden_size: int, state_size: int = 8,
                 dt_min: float = 1e-3, dt_max: float = 1e-1) -> None:
        super().__init__()
        D, N = hidden_size, state_size
        self.input_size, self.hidden_size, self.state_size = input_size, D, N
        self.in_proj = nn.Linear(input_size, D)  # u_t
        self.dt_proj = nn.Linear(D, D)  # delta_t's pre-activation
        self.B_proj = nn.Linear(D, N, bias=False)
        self.C_proj = nn.Linear(D, N, bias=False)
        self.A_log = nn.Parameter(torch.log(torch.arange(1, N + 1, dtype=torch.float32)).repeat(D, 1))  # (D, N)
        self.D_skip = nn.Parameter(torch.ones(D))
        # delta's bias: softplus^-1 of a step size drawn log-uniformly in [dt_min, dt_max], as Mamba does
        dt = torch.exp(torch.rand(D) * (math.log(dt_max) - math.log(dt_min)) + math.log(dt_min))  # (D,)
        with torch.no_grad():
            self.dt_proj.bias.copy_(dt + torch.log(-torch.expm1(-dt)))  # softplus(this) = dt
            self.dt_proj.weight.mul_(0.1)  # so that the input moves delta, but does not drown the bias at first

    def parts(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """x (..., I) -> u, delta (..., D) and B_t, C_t (..., N)."""
        u = self.in_proj(x)
        delta = F.softplus(self.dt_proj(u))
        return u, delta, self.B_proj(u), self.C_proj(u)

    def decay(self, delta: Tensor) -> Tensor:
        """delta (..., D) -> a = exp(delta A) (..., D, N), each in (0, 1)."""
        return torch.exp(delta.unsqueeze(-1) * -torch.exp(self.A_log))

    def coefficients(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """x (B, T, I) -> a, b (B, T, D * N): the state h_t = a_t * h_{t-1} + b_t, flattened."""
        u, delta, B_t, _ = self.parts(x)
        return self._a_b(u, delta, B_t)

    def _a_b(self, u: Tensor, delta: Tensor, B_t: Tensor) -> tuple[Tensor, Tensor]:
        a = self.decay(delta)  # (B, T, D, N)
        b = (delta * u).unsqueeze(-1) * B_t.unsqueeze(-2)  # (B, T, D, N): delta_t[d] u_t[d] B_t[n]
        return a.flatten(2), b.flatten(2)

    def readout(self, h: Tensor, u: Tensor, C_t: Tensor) -> Tensor:
        """h (..., D, N), u (..., D), C_t (..., N) -> y (..., D)."""
        return (h * C_t.unsqueeze(-2)).sum(-1) + self.D_skip * u

    def forward(self, x: Tensor, h0: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """The parallel (training) form: x (B, T, I), h0 (B, D, N) or None -> out (B, T, D), h_T (B, D, N)."""
        B, T = x.shape[:2]
        u, delta, B_t, C_t = self.parts(x)  # (B, T, D), (B, T, D), (B, T, N), (B, T, N)
        a, b = self._a_b(u, delta, B_t)  # (B, T, D * N) each
        h = scan_parallel(a, b, None if h0 is None else h0.flatten(1))  # (B, T, D * N)
        h = h.reshape(B, T, self.hidden_size, self.state_size)  # (B, T, D, N)
        return self.readout(h, u, C_t), h[:, -1]

    def step(self, x_t: Tensor, h: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """The recurrent (generation) form: x_t (B, I), h (B, D, N) or None (zeros) -> y_t (B, D), h."""
        u, delta, B_t, C_t = self.parts(x_t)  # (B, D), (B, D), (B, N), (B, N)
        if h is None:
            h = x_t.new_zeros(x_t.shape[0], self.hidden_size, self.state_size)
        h = self.decay(delta) * h + (delta * u).unsqueeze(-1) * B_t.unsqueeze(-2)  # (B, D, N)
        return self.readout(h, u, C_t), h
