"""A vanilla (Elman) RNN written out one time step at a time: the loop that nn.RNN hides.

    h_t = tanh(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh)

The parameters are named, shaped and initialised like torch.nn.RNN's single layer, so state
dicts move freely between the two. `Recurrent` is the part the LSTM and GRU files share with
this one: torch's weight layout, its shape conventions and the loop over time; `set_gate_bias`
is how they open a gate, and `set_spectral_radius` rescales the recurrent weights.
"""
from __future__ import annotations

import math
from typing import Self

import torch
from torch import Tensor, nn


class Recurrent(nn.Module):
    """One recurrent layer with torch's parameter layout: `gates` blocks of H rows, stacked.

    A subclass writes `cell`, one time step from (x_t, state) to the next state, where the
    state is a tuple of (B, H) tensors whose first element is the hidden state h_t.
    """

    gates: int  # how many (H, .) blocks are stacked in each weight: 1 RNN, 4 LSTM, 3 GRU
    state_size = 1  # tensors in the state: h, or h and c for the LSTM
    torch_class: type[nn.RNNBase]  # the torch module whose weights `from_torch` accepts

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        batch_first: bool = False,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.batch_first = batch_first
        G, factory = self.gates * hidden_size, {"device": device, "dtype": dtype}
        # registered in torch's order, so the same seed draws the same weights as nn.RNN & co.
        self.weight_ih_l0 = nn.Parameter(torch.empty(G, input_size, **factory))  # (G, I)
        self.weight_hh_l0 = nn.Parameter(torch.empty(G, hidden_size, **factory))  # (G, H)
        self.bias_ih_l0 = nn.Parameter(torch.empty(G, **factory))  # (G,)
        self.bias_hh_l0 = nn.Parameter(torch.empty(G, **factory))  # (G,)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # torch's rule for every weight and bias: U(-1/sqrt(H), 1/sqrt(H))
        bound = 1 / math.sqrt(self.hidden_size)
        for p in self.parameters():
            nn.init.uniform_(p, -bound, bound)

    def cell(self, x_t: Tensor, state: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
        raise NotImplementedError

    def scan(self, x: Tensor, state: tuple[Tensor, ...] | None) -> tuple[Tensor, tuple[Tensor, ...]]:
        """Run `cell` along the sequence. x is (T, B, I), (B, T, I) if batch_first, or unbatched
        (T, I); each state tensor is (1, B, H), or (1, H) when unbatched, zeros when None.
        Returns out, the hidden state at every step, and the final state, in x's layout."""
        if x.dim() not in (2, 3) or x.shape[-1] != self.input_size:
            raise ValueError(f"expected input (T, B, {self.input_size}) or (T, {self.input_size}), "
                             f"got {tuple(x.shape)}")
        unbatched = x.dim() == 2
        if unbatched:  # a batch of one, as torch does; batch_first does not apply
            x = x.unsqueeze(1)
            state = None if state is None else tuple(s.unsqueeze(1) for s in state)
        elif self.batch_first:
            x = x.transpose(0, 1)
        B = x.shape[1]  # x is now (T, B, I)
        if state is None:
            state = tuple(x.new_zeros(B, self.hidden_size) for _ in range(self.state_size))
        else:
            for s in state:
                if s.shape != (1, B, self.hidden_size):
                    raise ValueError(f"expected state (1, {B}, {self.hidden_size}), got {tuple(s.shape)}")
            state = tuple(s[0] for s in state)  # (B, H) each
        outs = []
        for x_t in x:  # (B, I): the explicit loop over time
            state = self.cell(x_t, state)
            outs.append(state[0])
        out = torch.stack(outs)  # (T, B, H)
        if unbatched:
            return out[:, 0], state  # (T, H); each state (B=1, H) doubles as torch's (1, H)
        if self.batch_first:
            out = out.transpose(0, 1)  # (B, T, H)
        return out, tuple(s.unsqueeze(0) for s in state)  # (1, B, H) each

    @classmethod
    def from_torch(cls, module: nn.RNNBase) -> Self:
        """A copy of a single-layer torch module: same weights, dtype, device and batch_first."""
        if type(module) is not cls.torch_class:
            raise TypeError(f"{cls.__name__}.from_torch needs an nn.{cls.torch_class.__name__}, "
                            f"got {type(module).__name__}")
        if module.num_layers != 1 or module.bidirectional or not module.bias or module.proj_size:
            raise ValueError("only a single-layer, unidirectional module with biases and no proj_size "
                             "can be copied")
        if getattr(module, "nonlinearity", "tanh") != "tanh":
            raise ValueError(f"only the tanh RNN can be copied, got nonlinearity={module.nonlinearity!r}")
        w = module.weight_ih_l0
        ours = cls(module.input_size, module.hidden_size, module.batch_first, device=w.device, dtype=w.dtype)
        ours.load_state_dict(module.state_dict())
        return ours

    def extra_repr(self) -> str:
        return f"{self.input_size}, {self.hidden_size}, batch_first={self.batch_first}"


class RNN(Recurrent):
    """Vanilla tanh RNN, one layer, with nn.RNN's parameters and forward signature."""

    gates = 1
    torch_class = nn.RNN

    def cell(self, x_t: Tensor, state: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
        (h,) = state  # (B, H)
        h = torch.tanh(x_t @ self.weight_ih_l0.T + self.bias_ih_l0
                       + h @ self.weight_hh_l0.T + self.bias_hh_l0)
        return (h,)

    def forward(self, x: Tensor, h0: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """x (T, B, I), (B, T, I) if batch_first, or (T, I) -> out (.., H) in x's layout, h_n (1, B, H)."""
        out, (h_n,) = self.scan(x, None if h0 is None else (h0,))
        return out, h_n


def set_gate_bias(module: nn.Module, gate: int, value: float) -> None:
    """Set block `gate` (H entries) of every bias vector of a recurrent layer to `value`, in place.

    Works for torch's modules (every layer and direction) and ours, whose biases stack their
    gates in blocks of hidden_size: i, f, g, o for the LSTM, r, z, n for the GRU.
    """
    biases = [p for name, p in module.named_parameters() if name.startswith("bias_")]
    if not biases:
        raise ValueError(f"this {type(module).__name__} has no biases (bias=False), so there is no gate bias to set")
    H = module.hidden_size
    with torch.no_grad():  # an in-place edit of leaf parameters, not part of any graph
        for b in biases:
            b[gate * H : (gate + 1) * H] = value


def spectral_radius(weight: Tensor) -> float:
    """The largest absolute eigenvalue of a square matrix: how much repeated multiplication by it
    stretches a vector per step, in the long run."""
    return torch.linalg.eigvals(weight.detach().double()).abs().max().item()


def set_spectral_radius(layer: nn.RNN | RNN, radius: float) -> nn.RNN | RNN:
    """Scale a one-layer RNN's recurrent weight W_hh so its spectral radius is `radius`; returns `layer`."""
    with torch.no_grad():
        layer.weight_hh_l0.mul_(radius / spectral_radius(layer.weight_hh_l0))
    return layer
