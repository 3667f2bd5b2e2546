"""A small pre-LayerNorm transformer: the block, the stack, and a token model that classifies
or predicts the next token.

One block keeps a residual stream x (B, L, d) and adds two things to it, each computed from a
LayerNorm'd copy (pre-LN, as in GPT-2: the stream itself is never normalised, so a gradient
reaches every block through the additions unchanged):

    x = x + MultiHeadAttention(LayerNorm(x))     tokens exchange information
    x = x + MLP(LayerNorm(x))                    each position on its own: d -> d_ff -> d, GELU

Parameters are named like nn.TransformerEncoderLayer's (self_attn, linear1, linear2, norm1,
norm2), so a layer built as nn.TransformerEncoderLayer(d, heads, d_ff, dropout=0,
activation="gelu", batch_first=True, norm_first=True) loads into Block and computes the same.

Transformer stacks blocks on vectors: an optional input projection, positions, the blocks and a
final LayerNorm. TokenModel puts an embedding before it and a linear head after it, read at
every position (next-token prediction, `generate`) or at the last one (`classify`).
"""
from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from lessonlib.models.multihead import KVCache, MultiHeadAttention
from lessonlib.models.positional import positions as make_positions


class Block(nn.Module):
    """Pre-LN transformer block: x (B, L, d) -> (x (B, L, d), attention weights (B, heads, L, L_k) or None)."""

    def __init__(self, d_model: int, heads: int, d_ff: int | None = None) -> None:
        super().__init__()
        d_ff = 4 * d_model if d_ff is None else d_ff
        # registered in torch's order, so the same seed draws the same weights as nn.TransformerEncoderLayer
        self.self_attn = MultiHeadAttention(d_model, heads)
        self.linear1 = nn.Linear(d_model, d_ff)  # the MLP widens each position's vector ...
        self.linear2 = nn.Linear(d_ff, d_model)  # ... and narrows it back
        self.norm1 = nn.LayerNorm(d_model)  # before attention
        self.norm2 = nn.LayerNorm(d_model)  # before the MLP

    def forward(self, x: Tensor, *, causal: bool = False, key_padding_mask: Tensor | None = None,
                cache: KVCache | None = None, need_weights: bool = False,
                last: int | None = None) -> tuple[Tensor, Tensor | None]:
        """With `last`, only the last `last` positions come out (B, last, d); they still attend to every position."""
        attended, weights = self.self_attn(self.norm1(x), causal=causal, key_padding_mask=key_padding_mask,
                                           cache=cache, need_weights=need_weights, last=last)
        if last is not None:
            x = x[:, -last:]
        x = x + attended  # residual: the block adds to the stream, it does not replace it
        x = x + self.linear2(F.gelu(self.linear1(self.norm2(x))))
        return x, weights


class Transformer(nn.Module):
    """Vectors in, vectors out: x (B, L, d_in) -> (B, L, d_model), and each block's attention
    weights (B, heads, L, L_k) if need_weights (an empty list if not).

    d_in: the inputs' width, projected to d_model when it differs (the memory task feeds it the
    same 16-number embeddings as its RNNs). causal: each position sees itself and earlier ones.
    """

    def __init__(self, d_model: int, heads: int, layers: int = 1, *, d_in: int | None = None,
                 positions: str | None = "learned", max_len: int = 512, d_ff: int | None = None,
                 causal: bool = True) -> None:
        super().__init__()
        self.causal = causal
        self.project = nn.Linear(d_in, d_model) if d_in not in (None, d_model) else None
        self.positions = make_positions(positions, d_model, max_len)
        self.blocks = nn.ModuleList(Block(d_model, heads, d_ff) for _ in range(layers))
        self.norm = nn.LayerNorm(d_model)

    def forward(self, x: Tensor, *, key_padding_mask: Tensor | None = None,
                caches: list[KVCache] | None = None, need_weights: bool = False,
                last: int | None = None) -> tuple[Tensor, list[Tensor]]:
        """With caches (one per block), x holds only the positions after those already cached.
        With `last`, only the last `last` positions come out (B, last, d_model): the final block
        computes only theirs, the earlier blocks every position, since the final one reads them all."""
        if self.project is not None:
            x = self.project(x)
        if self.positions is not None:
            x = self.positions(x, start=len(caches[0]) if caches else 0)
        all_weights = []
        for i, block in enumerate(self.blocks):
            final = i == len(self.blocks) - 1
            x, weights = block(x, causal=self.causal, key_padding_mask=key_padding_mask,
                               cache=caches[i] if caches else None, need_weights=need_weights,
                               last=last if final else None)
            if need_weights:
                all_weights.append(weights)
        return self.norm(x), all_weights


class TokenModel(nn.Module):
    """Embedding -> Transformer -> linear head at every position: tokens (B, L) -> logits (B, L, outputs).

    outputs defaults to vocab (next-token prediction); a classifier reads the last position,
    which in a causal model is the only one that has seen the whole sequence.
    """

    def __init__(self, vocab: int, d_model: int, heads: int, layers: int = 1, *,
                 outputs: int | None = None, **transformer: object) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.transformer = Transformer(d_model, heads, layers, **transformer)
        self.head = nn.Linear(d_model, vocab if outputs is None else outputs)

    def forward(self, tokens: Tensor, *, key_padding_mask: Tensor | None = None,
                caches: list[KVCache] | None = None, need_weights: bool = False) -> tuple[Tensor, list[Tensor]]:
        """logits (B, L, outputs) and, if need_weights, each block's weights (B, heads, L, L_k)."""
        x, weights = self.transformer(self.embed(tokens), key_padding_mask=key_padding_mask, caches=caches,
                                      need_weights=need_weights)
        return self.head(x), weights

    def classify(self, tokens: Tensor) -> Tensor:
        """(B, L) -> (B, outputs): the logits at the last position."""
        return self(tokens)[0][:, -1]

    @torch.no_grad()
    def generate(self, prompt: Tensor, steps: int, *, use_cache: bool = True) -> Tensor:
        """Greedy: append the most likely next token `steps` times. prompt (B, P) -> (B, P + steps).

        With use_cache, the prompt runs once and every later step feeds only the newest token,
        reading earlier keys and values from the cache; without, every step reruns the whole
        sequence. A causal model gives the same tokens either way; a model without the causal
        mask can only run without the cache, since its earlier positions would change with every
        new token.
        """
        if use_cache and not self.transformer.causal:
            raise ValueError("a KV cache keeps earlier positions fixed, so it needs a causal model")
        tokens = prompt
        caches = [KVCache() for _ in self.transformer.blocks] if use_cache else None
        new = prompt  # what the next forward pass reads
        for _ in range(steps):
            logits, _ = self(new, caches=caches)
            next_token = logits[:, -1].argmax(-1, keepdim=True)  # (B, 1)
            tokens = torch.cat([tokens, next_token], dim=1)
            new = next_token if use_cache else tokens
        return tokens
