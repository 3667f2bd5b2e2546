"""Writing text with a language model: pick a next character, append it, repeat.

    logits (B, V) --/ temperature--> --keep the top_k--> softmax --draw--> next token (B, 1)

Temperature divides the logits before the softmax: below 1 it sharpens the distribution (towards
always taking the most likely character, greedy decoding, which temperature 0 means here), above
1 it flattens it (towards uniform noise). top_k keeps only the k most likely characters and
renormalises, so the long tail of unlikely ones can never be drawn.

`generate` works for every lessonlib language model, through its `stream(tokens, state)`: a
recurrent model carries its hidden state, a transformer its KV cache, so each new character costs
one step. With use_cache=False it rereads the whole text so far at every step instead (for a
transformer, its last `context` characters), which must give the same characters.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn


def next_token(logits: Tensor, temperature: float = 1.0, top_k: int | None = None,
               generator: torch.Generator | None = None) -> Tensor:
    """logits (B, V) -> (B, 1) token ids. temperature 0: the most likely token (greedy)."""
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    if temperature == 0:
        return logits.argmax(-1, keepdim=True)
    logits = logits / temperature
    if top_k is not None:
        kth = logits.topk(min(top_k, logits.shape[-1]), dim=-1).values[:, -1:]  # (B, 1): the k-th largest
        logits = logits.masked_fill(logits < kth, float("-inf"))  # outside the top k: probability 0
    probs = logits.softmax(-1)  # (B, V)
    return torch.multinomial(probs, 1, generator=generator)  # (B, 1)


@torch.no_grad()
def generate(model: nn.Module, prompt: Tensor, steps: int, *, temperature: float = 1.0,
             top_k: int | None = None, generator: torch.Generator | None = None,
             use_cache: bool = True) -> Tensor:
    """prompt (B, P) -> (B, P + steps): the prompt and `steps` characters drawn one at a time."""
    tokens = prompt
    window = getattr(model, "context", None)  # a transformer reads at most this many; an RNN, any
    if use_cache:
        logits, state = model.stream(prompt)  # the prompt once; then one character per step
    for _ in range(steps):
        if not use_cache:  # reread everything so far (or the last `window` characters)
            logits, _ = model.stream(tokens if window is None else tokens[:, -window:])
        token = next_token(logits[:, -1], temperature, top_k, generator)  # (B, 1)
        tokens = torch.cat([tokens, token], dim=1)
        if use_cache and len(tokens[0]) < prompt.shape[1] + steps:
            logits, state = model.stream(token, state)  # only the new character
    return tokens
