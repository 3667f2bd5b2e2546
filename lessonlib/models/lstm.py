"""An LSTM layer written out gate by gate, with torch.nn.LSTM's parameters and conventions.

    i = sigmoid(W_ii x + b_ii + W_hi h + b_hi)     input gate: how much new content to write
    f = sigmoid(W_if x + b_if + W_hf h + b_hf)     forget gate: how much old memory to keep
    g =    tanh(W_ig x + b_ig + W_hg h + b_hg)     candidate: the new content
    o = sigmoid(W_io x + b_io + W_ho h + b_ho)     output gate: how much memory to show
    c' = f * c + i * g
    h' = o * tanh(c')

The four gates are stacked in the order i, f, g, o in weight_ih_l0 (4H, I), weight_hh_l0 (4H, H)
and the two (4H,) biases, exactly as torch stores them.
"""
from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor, nn

from lessonlib.models.rnn import Recurrent, set_gate_bias


class LSTMStep(NamedTuple):
    """One LSTM time step: the new state and every gate that produced it, each (B, H)."""

    h: Tensor
    c: Tensor
    forget: Tensor
    input: Tensor
    candidate: Tensor
    output: Tensor


class LSTM(Recurrent):
    """One LSTM layer with nn.LSTM's parameters and forward signature."""

    gates = 4
    state_size = 2  # (h, c)
    torch_class = nn.LSTM

    def step(self, x_t: Tensor, state: tuple[Tensor, Tensor]) -> LSTMStep:
        """One time step: x_t (B, I), state (h, c) each (B, H)."""
        h, c = state
        # all four gates in two matmuls, then split: (B, 4H) -> four (B, H)
        z = x_t @ self.weight_ih_l0.T + self.bias_ih_l0 + h @ self.weight_hh_l0.T + self.bias_hh_l0
        i, f, g, o = z.chunk(4, dim=-1)
        i, f, g, o = torch.sigmoid(i), torch.sigmoid(f), torch.tanh(g), torch.sigmoid(o)
        c = f * c + i * g  # the memory is updated additively, which lets gradients survive long spans
        h = o * torch.tanh(c)
        return LSTMStep(h=h, c=c, forget=f, input=i, candidate=g, output=o)

    def cell(self, x_t: Tensor, state: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
        s = self.step(x_t, state)
        return s.h, s.c

    def forward(
        self, x: Tensor, state: tuple[Tensor, Tensor] | None = None
    ) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        """x (T, B, I), (B, T, I) if batch_first, or (T, I); state (h0, c0) each (1, B, H).
        Returns out (.., H) in x's layout and (h_n, c_n) each (1, B, H)."""
        out, (h_n, c_n) = self.scan(x, state)
        return out, (h_n, c_n)


def open_forget_gate(lstm: nn.LSTM | LSTM, value: float = 1.5) -> nn.LSTM | LSTM:
    """Set the forget-gate slice of every bias vector to `value`, in place, and return `lstm`.

    With both bias_ih and bias_hh at 1.5 the forget gate starts near sigmoid(3.0) = 0.95, so a
    fresh LSTM remembers by default instead of halving its memory at every step
    (Gers et al. 2000; Jozefowicz et al. 2015).
    """
    if not isinstance(lstm, (nn.LSTM, LSTM)):
        raise TypeError(f"expected an nn.LSTM or lessonlib LSTM, got {type(lstm).__name__}")
    set_gate_bias(lstm, 1, value)  # (4H,) biases in gate order i, f, g, o
    return lstm
