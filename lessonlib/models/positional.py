"""Position information for attention, which by itself cannot tell positions apart.

Self-attention treats its input as a set: permute the positions and the outputs are permuted
the same way, nothing else changes. Adding a vector that depends on the position to each input
breaks that symmetry. Two common choices, both added to the (B, L, d) input:

- sinusoidal (Vaswani et al., 2017), fixed, no parameters, defined for any position:
      PE[p, 2i]   = sin(p / base^(2i/d))
      PE[p, 2i+1] = cos(p / base^(2i/d))
  Each pair of features is a clock turning at its own speed, from one radian per position
  (i = 0) down to one turn in 2*pi*base positions, so every position gets its own pattern,
  and PE[p] . PE[p + k] depends on the offset k only (a sum of cosines of k times the speeds).
- learned: one trained vector per position, up to a fixed max_len (GPT-2's choice).

`start` shifts the positions, so that a token generated at position n (with a KV cache, one
token at a time) gets the same vector it would get in a full forward pass.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn


def sinusoidal(length: int, d: int, *, start: int = 0, base: float = 10_000.0,
               device: torch.device | str | None = None, dtype: torch.dtype = torch.float32) -> Tensor:
    """(length, d): the sinusoidal encodings of positions start .. start + length - 1 (d even)."""
    if d % 2:
        raise ValueError(f"d must be even (sin and cos pairs), got {d}")
    position = torch.arange(start, start + length, dtype=torch.float64, device=device)[:, None]  # (L, 1)
    speed = base ** (-torch.arange(0, d, 2, dtype=torch.float64, device=device) / d)  # (d/2,) radians per position
    angle = position * speed  # (L, d/2); float64, so that far positions keep their digits
    pe = torch.stack([angle.sin(), angle.cos()], dim=-1)  # (L, d/2, 2): sin, cos interleaved
    return pe.flatten(-2).to(dtype)  # (L, d)


class SinusoidalPositions(nn.Module):
    """Adds the sinusoidal encodings: (B, L, d) -> (B, L, d). No parameters."""

    def __init__(self, d: int, base: float = 10_000.0) -> None:
        super().__init__()
        self.d, self.base = d, base

    def forward(self, x: Tensor, start: int = 0) -> Tensor:
        return x + sinusoidal(x.shape[-2], self.d, start=start, base=self.base, device=x.device, dtype=x.dtype)

    def extra_repr(self) -> str:
        return f"d={self.d}, base={self.base:g}"


class LearnedPositions(nn.Embedding):
    """Adds one trained vector per position, for positions below max_len: (B, L, d) -> (B, L, d)."""

    def __init__(self, max_len: int, d: int) -> None:
        super().__init__(max_len, d)

    def forward(self, x: Tensor, start: int = 0) -> Tensor:
        L = x.shape[-2]
        if start + L > self.num_embeddings:
            raise ValueError(f"positions up to {start + L - 1}, but only {self.num_embeddings} were learned")
        return x + super().forward(torch.arange(start, start + L, device=x.device))


POSITIONS = {"sinusoidal", "learned", None}


def positions(kind: str | None, d: int, max_len: int) -> nn.Module | None:
    """The positional module for `kind`: "sinusoidal", "learned", or None for none at all."""
    if kind == "sinusoidal":
        return SinusoidalPositions(d)
    if kind == "learned":
        return LearnedPositions(max_len, d)
    if kind is None:
        return None
    raise ValueError(f"unknown positions {kind!r}, expected one of {POSITIONS}")
