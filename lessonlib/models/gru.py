"""A GRU layer written out gate by gate, with torch.nn.GRU's parameters and conventions.

    r = sigmoid(W_ir x + b_ir + W_hr h + b_hr)          reset gate: how much of h the candidate sees
    z = sigmoid(W_iz x + b_iz + W_hz h + b_hz)          update gate: how much of h to keep
    n =    tanh(W_in x + b_in + r * (W_hn h + b_hn))    candidate
    h' = (1 - z) * n + z * h

Note that r multiplies W_hn h + b_hn, bias included: that is torch's (and cuDNN's) variant,
not the original paper's r * h inside the matmul. The gates are stacked r, z, n in
weight_ih_l0 (3H, I), weight_hh_l0 (3H, H) and the two (3H,) biases.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

from lessonlib.models.rnn import Recurrent, set_gate_bias


class GRU(Recurrent):
    """One GRU layer with nn.GRU's parameters and forward signature."""

    gates = 3
    torch_class = nn.GRU

    def cell(self, x_t: Tensor, state: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
        (h,) = state  # (B, H)
        # the input and hidden projections stay apart because r gates only the hidden part of n
        x_r, x_z, x_n = (x_t @ self.weight_ih_l0.T + self.bias_ih_l0).chunk(3, dim=-1)  # (B, H) each
        h_r, h_z, h_n = (h @ self.weight_hh_l0.T + self.bias_hh_l0).chunk(3, dim=-1)  # (B, H) each
        r = torch.sigmoid(x_r + h_r)
        z = torch.sigmoid(x_z + h_z)
        n = torch.tanh(x_n + r * h_n)
        h = (1 - z) * n + z * h  # z near 1 copies h forward untouched
        return (h,)

    def forward(self, x: Tensor, h0: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """x (T, B, I), (B, T, I) if batch_first, or (T, I) -> out (.., H) in x's layout, h_n (1, B, H)."""
        out, (h_n,) = self.scan(x, None if h0 is None else (h0,))
        return out, h_n


def open_update_gate(gru: nn.GRU | GRU, value: float = 1.5) -> nn.GRU | GRU:
    """Set the update-gate slice of every bias vector to `value`, in place, and return `gru`.

    The GRU's counterpart of lessonlib.models.lstm.open_forget_gate: with both biases at 1.5 the
    update gate starts near sigmoid(3.0) = 0.95, so a fresh GRU carries its state forward
    (h' = (1 - z) n + z h) instead of replacing half of it at every step.
    """
    if not isinstance(gru, (nn.GRU, GRU)):
        raise TypeError(f"expected an nn.GRU or lessonlib GRU, got {type(gru).__name__}")
    set_gate_bias(gru, 1, value)  # (3H,) biases in gate order r, z, n
    return gru
