"""A character-level language model with a recurrent layer: embed, recur, predict.

    tokens (B, T) -> embed (B, T, E) -> nn.RNN / nn.GRU / nn.LSTM (B, T, H) -> head (B, T, V)

At every position the head reads the hidden state, which has seen this character and every one
before it, and gives logits for the next character. The layer is torch's own (a fused kernel on
the CPU, cuDNN on a GPU); lessonlib.models.{rnn,gru,lstm} write the same layers out step by step
and load these weights (`from_torch`).

`forward(tokens, state)` starts from `state`, the hidden state a previous call returned (None:
zeros), and returns the new one, so a long text can be read in chunks: this is what truncated
backpropagation through time carries from one chunk to the next (after `detach_state`), and
what generation carries from one character to the next. `stream` is the same call under the
name every lessonlib language model shares (lessonlib.models.char_transformer has one too).
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

LAYERS = {"rnn": nn.RNN, "gru": nn.GRU, "lstm": nn.LSTM}
State = Tensor | tuple[Tensor, Tensor]  # h (1, B, H), or (h, c) for the LSTM


class CharRNN(nn.Module):
    """Embedding -> one recurrent layer -> linear head, at every position."""

    def __init__(self, kind: str, vocab: int, embedding: int, hidden: int,
                 device: torch.device | str | None = None) -> None:
        super().__init__()
        if kind not in LAYERS:
            raise ValueError(f"unknown kind {kind!r}, expected one of {tuple(LAYERS)}")
        self.kind = kind
        self.embed = nn.Embedding(vocab, embedding, device=device)
        self.rnn = LAYERS[kind](embedding, hidden, batch_first=True, device=device)
        self.head = nn.Linear(hidden, vocab, device=device)

    def forward(self, tokens: Tensor, state: State | None = None) -> tuple[Tensor, State]:
        """tokens (B, T), state from the previous chunk or None -> logits (B, T, V), state."""
        out, state = self.rnn(self.embed(tokens), state)  # (B, T, H): the hidden state after each character
        return self.head(out), state

    def stream(self, tokens: Tensor, state: State | None = None) -> tuple[Tensor, State]:
        """Read `tokens` after everything `state` has read: logits (B, T, V) and the new state."""
        return self(tokens, state)


def detach_state(state: State | None) -> State | None:
    """The same numbers, cut from the graph that computed them: backpropagation stops here."""
    if state is None:
        return None
    if isinstance(state, tuple):
        return tuple(s.detach() for s in state)
    return state.detach()
