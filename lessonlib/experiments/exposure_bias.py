"""Exposure bias: one seq2seq model, decoded with teacher forcing and from its own outputs.

Trained with teacher forcing, the decoder always reads the correct previous token. Decoding a
new input it has no correct tokens to read: it reads its own last output (free running), so a
wrong token early on becomes part of the input for every later step, a situation training never
showed it. Comparing the two, position by position, on the same strings measures what that
costs. Exact match is the same under both (all tokens right under one means the other feeds
exactly the same tokens); the per-position accuracy is where they part.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from lessonlib.device import steady_cpu
from lessonlib.models import seq2seq


@dataclass(frozen=True)
class PositionAccuracy:
    teacher_forced: torch.Tensor    # (T+1,) share of strings whose token at each position is right
    free_running: torch.Tensor      # (T+1,) the same, decoding greedily from the model's own outputs
    exact_teacher_forced: torch.Tensor  # (n,) bool: every token right under teacher forcing
    exact_free_running: torch.Tensor    # (n,) bool: every token right when free running
    after_error_teacher_forced: float   # accuracy at positions after a string's first free-running error
    after_error_free_running: float     # ... the same positions of the same strings, free running


@torch.no_grad()
def position_accuracy(model: seq2seq.Seq2Seq, length: int, n: int = 500, seed: int = 1234
                      ) -> PositionAccuracy:
    """Per output position, the share of ``n`` strings of ``length`` digits decoded right.

    Uses exact_match's strings (same ``seed``). The last position is ``</s>``. Free running ends
    at the model's first ``</s>``, as in greedy decoding: a string ended too early is wrong at
    every later position.
    """
    device = next(model.parameters()).device
    src, tgt = seq2seq.make_batch(length, n, torch.Generator().manual_seed(seed + length), device)
    with steady_cpu(device):
        teacher = model(src, tgt).argmax(-1)                          # (n, T+1): fed the right tokens
        free, _ = model.greedy_decode(src, max_len=length + 1)        # (n, T+1): fed its own tokens
    right_tf, right_free = teacher == tgt, free == tgt                # (n, T+1)
    after = after_first_error(~right_free)
    return PositionAccuracy(
        teacher_forced=right_tf.float().mean(0).cpu(),
        free_running=right_free.float().mean(0).cpu(),
        exact_teacher_forced=right_tf.all(1).cpu(),
        exact_free_running=right_free.all(1).cpu(),
        after_error_teacher_forced=right_tf[after].float().mean().item(),
        after_error_free_running=right_free[after].float().mean().item(),
    )


def after_first_error(wrong: torch.Tensor) -> torch.Tensor:
    """wrong (n, L) bool -> (n, L) bool: True at the positions strictly after each row's first True."""
    errors_before = wrong.int().cumsum(dim=1) - wrong.int()  # errors at earlier positions only
    return errors_before > 0
