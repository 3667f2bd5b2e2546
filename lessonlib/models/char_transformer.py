"""A character-level GPT: lesson 3's causal transformer (lessonlib.models.transformer) on characters.

    tokens (B, L) -> embed (B, L, d) + learned positions -> causal blocks -> LayerNorm -> head (B, L, V)

TokenModel already is this model; CharTransformer adds what a language model needs on top:
`context`, the longest sequence it can read (its learned positions stop there), and `stream`,
which reads new characters after earlier ones through a KV cache per block, the state a
transformer carries while it generates. Training reads whole windows with `forward` (no cache).
"""
from __future__ import annotations

import torch
from torch import Tensor

from lessonlib.models.multihead import KVCache
from lessonlib.models.transformer import TokenModel


class CharTransformer(TokenModel):
    """TokenModel with learned positions up to `context`, and `stream` for generation."""

    def __init__(self, vocab: int, d_model: int, heads: int, layers: int, context: int,
                 device: torch.device | str | None = None) -> None:
        super().__init__(vocab, d_model, heads, layers, positions="learned", max_len=context, causal=True)
        self.context = context
        self.to(device)

    def stream(self, tokens: Tensor, state: list[KVCache] | None = None) -> tuple[Tensor, list[KVCache]]:
        """Read `tokens` (B, T) after the positions in `state` (one KVCache per block; None: none
        yet): logits (B, T, V) and the caches, which now hold these positions too."""
        caches = [KVCache() for _ in self.transformer.blocks] if state is None else state
        if len(caches[0]) + tokens.shape[1] > self.context:
            raise ValueError(f"the model reads at most {self.context} characters; "
                             f"{len(caches[0])} are cached and {tokens.shape[1]} more were given")
        logits, _ = self(tokens, caches=caches)
        return logits, caches
