"""Gradient reach: how strongly does the final output still depend on an input t steps back?

For one random input sequence x_1..x_L and an untrained model, we measure the size of the
Jacobian d(final output)/d(x_t) (its Frobenius norm) at every position t, average it over
seeds, and index it by distance from the end (distance 0 is the last input). This is exactly
the factor that scales the training signal reaching x_t, so it predicts which memory spans a
model can learn:

    rnn        vanilla tanh RNN: each step multiplies by W_hh and tanh', so reach decays geometrically
    lstm       default LSTM: the forget gate starts near sigmoid(0) = 0.5, so it decays too
    lstm_open  LSTM with the forget-gate biases set to 1.5 + 1.5: f near 0.95, the memory survives
    attention  one attention read from the last position: every input is one step away

Two options probe what sets the curve: `radius` rescales the RNN's recurrent weight W_hh to a
given spectral radius (PyTorch's U(-1/sqrt(H), 1/sqrt(H)) start gives about 1/sqrt(3); well
above 1 the gradient explodes instead), and `warmup` feeds that many inputs before the measured
ones, so the measurement starts from a state that is no longer empty.

The recurrent layers are torch's nn.RNN and nn.LSTM: a handful of fused ops per step instead of
our hand-written cells' dozen, which matters for speed when the CPU is shared; lessonlib's
cells have the same parameters and measure the same reach (tests/test_gradient_reach.py).
"""
from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor, nn

from lessonlib.device import steady_cpu
from lessonlib.models.attention import dot_product_attention
from lessonlib.models.lstm import open_forget_gate
from lessonlib.models.rnn import set_spectral_radius

MODELS = ("rnn", "lstm", "lstm_open", "attention")
INPUT_SIZE = 16
HIDDEN_SIZE = 32


class LastHidden(nn.Module):
    """A recurrent layer read out at the end: x (B, L, I) -> h_L (B, H)."""

    def __init__(self, layer: nn.RNNBase) -> None:
        super().__init__()
        self.layer = layer

    def forward(self, x: Tensor) -> Tensor:
        out, _ = self.layer(x)  # (B, L, H)
        return out[:, -1]


class AttentionStep(nn.Module):
    """One attention read: the query comes from the last input, keys and values from every input."""

    def __init__(self, input_size: int, hidden_size: int) -> None:
        super().__init__()
        self.query = nn.Linear(input_size, hidden_size)
        self.key = nn.Linear(input_size, hidden_size)
        self.value = nn.Linear(input_size, hidden_size)

    def forward(self, x: Tensor) -> Tensor:
        q = self.query(x[:, -1:])  # (B, 1, H)
        context, _ = dot_product_attention(q, self.key(x), self.value(x))  # (B, 1, H)
        return context[:, 0]


def build(model_name: str, input_size: int = INPUT_SIZE, hidden_size: int = HIDDEN_SIZE) -> nn.Module:
    """An untrained model mapping x (B, L, input_size) to its final output (B, hidden_size)."""
    if model_name == "rnn":
        return LastHidden(nn.RNN(input_size, hidden_size, batch_first=True))
    if model_name == "lstm":
        return LastHidden(nn.LSTM(input_size, hidden_size, batch_first=True))
    if model_name == "lstm_open":
        return LastHidden(open_forget_gate(nn.LSTM(input_size, hidden_size, batch_first=True), 1.5))
    if model_name == "attention":
        return AttentionStep(input_size, hidden_size)
    raise ValueError(f"unknown model {model_name!r}, expected one of {MODELS}")


def sample(
    model_name: str,
    seed: int,
    length: int,
    input_size: int = INPUT_SIZE,
    hidden_size: int = HIDDEN_SIZE,
    radius: float | None = None,
) -> tuple[nn.Module, Tensor]:
    """The untrained model and the N(0, 1) input sequence (length, input_size) that `seed` fixes,
    both drawn on the CPU. `radius` rescales an RNN's W_hh to that spectral radius."""
    torch.manual_seed(seed)
    model = build(model_name, input_size, hidden_size)
    if radius is not None:
        if model_name != "rnn":
            raise ValueError(f"radius rescales an RNN's recurrent weight; {model_name!r} is not the RNN")
        set_spectral_radius(model.layer, radius)
    # its own generator, so all four models see the same sequence for a given seed
    x = torch.randn(length, input_size, generator=torch.Generator().manual_seed(seed))
    return model, x


def jacobian_norms(model: nn.Module, x: Tensor) -> Tensor:
    """x (L, I) -> (L,): the Frobenius norm of d model(x) / d x_t at every position t.

    One backward pass gives all output units at once: run H copies of the sequence as a batch
    and backpropagate the identity, so copy i carries only output unit i and its input
    gradient is row i of the Jacobian.
    """
    H = model(x[None]).shape[-1]
    copies = x.expand(H, *x.shape).clone().requires_grad_()  # (H, L, I)
    out = model(copies)  # (H, H)
    out.backward(torch.eye(H, device=x.device, dtype=x.dtype))
    return copies.grad.norm(dim=(0, 2))  # (L,)


def gradient_reach(
    model_name: str,
    length: int = 60,
    seeds: tuple[int, ...] = (0, 1, 2),
    device: torch.device | str = "cpu",
    input_size: int = INPUT_SIZE,
    hidden_size: int = HIDDEN_SIZE,
    radius: float | None = None,
    warmup: int = 0,
) -> Tensor:
    """(length,) mean Jacobian norm over seeds, indexed by distance from the end (0 = last input).

    Each seed fixes both the model's initial weights and the N(0, 1) input sequence (see
    `sample`); both are drawn on the CPU and then moved, so every device measures the same
    model on the same data. With `warmup`, the model first reads that many more inputs, whose
    own gradients are not reported.
    """
    norms = []
    with steady_cpu(device):
        for seed in seeds:
            model, x = sample(model_name, seed, warmup + length, input_size, hidden_size, radius)
            reach = jacobian_norms(model.to(device), x.to(device))[warmup:]  # (L,): the measured inputs
            norms.append(reach.flip(0))  # flipped: index = distance from the end
    return torch.stack(norms).mean(0).cpu()


def all_reaches(
    length: int = 60, seeds: tuple[int, ...] = (0, 1, 2), device: torch.device | str = "cpu"
) -> dict[str, Tensor]:
    """gradient_reach for every model in MODELS: {model_name: (length,)}."""
    return {name: gradient_reach(name, length, seeds, device) for name in MODELS}


class LineFit(NamedTuple):
    factor: float  # exp(slope): the gradient is multiplied by this for every step further back
    r_squared: float  # share of log(reach)'s variance the line explains: 1 for a perfect line


def log_line(reach: Tensor, start: int = 1, end: int | None = None) -> LineFit:
    """The least-squares line through log(reach[start:end]) against distance.

    A constant factor per step is a straight line on a log scale; R^2 says how straight.
    Distance 0 is left out by default: the last input reaches the output without going through
    a single recurrent step, so it does not follow the per-step rule.
    """
    log_r = reach[start:end].double().log()
    distance = torch.arange(start, start + len(log_r), dtype=torch.float64)
    design = torch.stack([distance, torch.ones_like(distance)], 1)  # (n, 2): slope and intercept
    solution = torch.linalg.lstsq(design, log_r[:, None]).solution[:, 0]
    residual = log_r - design @ solution
    r_squared = 1 - (residual**2).sum() / ((log_r - log_r.mean()) ** 2).sum()
    return LineFit(math.exp(solution[0].item()), r_squared.item())
