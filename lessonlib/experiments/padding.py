"""Does padding change a seq2seq model's answers? The same strings, decoded alone and padded.

Served together with longer strings, a string is padded with PAD up to the batch's width. With a
packed encoder and an attention mask that changes nothing; without the mask the padded
positions take a share of every softmax, and the answer can depend on the batch.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from lessonlib.device import steady_cpu
from lessonlib.models import seq2seq


@dataclass(frozen=True)
class PaddingEffect:
    alone: dict[int, float]                # length -> exact match, each batch unpadded
    padded: dict[int, dict[int, float]]    # width -> length -> exact match, padded to that width
    changed: dict[int, dict[int, float]]   # width -> length -> share of answers unlike the unpadded ones

    def mean(self, width: int) -> float:
        """Exact match at ``width``, averaged over the lengths."""
        return sum(self.padded[width].values()) / len(self.padded[width])


@torch.no_grad()
def padding_effect(model: seq2seq.Seq2Seq, lengths: Sequence[int], widths: Sequence[int],
                   n: int = 500, seed: int = 1234) -> PaddingEffect:
    """Decode ``n`` strings per length (exact_match's strings for ``seed``) alone and padded to
    each width, with the model as it is (its ``mask`` setting included)."""
    device = next(model.parameters()).device
    alone_acc: dict[int, float] = {}
    padded_acc: dict[int, dict[int, float]] = {w: {} for w in widths}
    changed: dict[int, dict[int, float]] = {w: {} for w in widths}
    with steady_cpu(device):
        for length in lengths:
            src, tgt = seq2seq.make_batch(length, n, torch.Generator().manual_seed(seed + length), device)
            target = F.pad(tgt, (0, 2), value=seq2seq.PAD)              # (n, length + 3): too long is wrong
            alone, _ = model.greedy_decode(src, max_len=length + 3)
            alone_acc[length] = (alone == target).all(1).float().mean().item()
            for width in widths:
                wide = F.pad(src, (0, width - length), value=seq2seq.PAD)   # (n, width)
                tokens, _ = model.greedy_decode(wide, max_len=length + 3)
                padded_acc[width][length] = (tokens == target).all(1).float().mean().item()
                changed[width][length] = (tokens != alone).any(1).float().mean().item()
    return PaddingEffect(alone_acc, padded_acc, changed)
