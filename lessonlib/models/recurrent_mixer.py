"""A recurrent layer in the attention's place: the transformer block with another token mixer.

    x (B, L, d) -> layer (minGRU or linear attention) (B, L, d) -> out_proj (B, L, d)

A pre-LN transformer block mixes positions with self-attention and then transforms each position
with its MLP. The recurrent models of the last lesson are built the same way, with a recurrent
layer as the mixer (the minGRU paper's language model, like Mamba's, keeps the block and swaps the
mixer). RecurrentMixer takes the attention's place in lessonlib.models.transformer.Block, so that
two models differ in the mixer only. A recurrence reads only earlier positions whatever it is
asked, so it accepts causal=True alone, and no padding mask, cache or attention weights.
"""
from __future__ import annotations

from torch import Tensor, nn

from lessonlib.models.linear_attention import LinearAttention
from lessonlib.models.min_gru import MinGRU

LAYERS = {"min_gru": lambda d: MinGRU(d, d), "linear_attention": lambda d: LinearAttention(d, d)}


class RecurrentMixer(nn.Module):
    """x (B, L, d) -> (out (B, L, d), None): the recurrent layer `kind`, then an output projection
    as multi-head attention has."""

    def __init__(self, kind: str, d_model: int) -> None:
        super().__init__()
        if kind not in LAYERS:
            raise ValueError(f"unknown mixer {kind!r}, expected one of {tuple(LAYERS)}")
        self.kind = kind
        self.layer = LAYERS[kind](d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, x: Tensor, *, causal: bool = False, key_padding_mask: Tensor | None = None,
                cache: object = None, need_weights: bool = False, last: int | None = None) -> tuple[Tensor, None]:
        if not causal or key_padding_mask is not None or cache is not None or need_weights:
            raise ValueError("a recurrent mixer reads only earlier positions (causal=True), and takes no "
                             "padding mask, cache or attention weights")
        out, _ = self.layer(x)  # (B, L, d): position t has read positions 0..t of the window
        out = self.out_proj(out)
        return (out if last is None else out[:, -last:]), None
