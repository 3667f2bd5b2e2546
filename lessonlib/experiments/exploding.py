"""Exploding gradients and gradient clipping, on the memory task's RNN.

PyTorch starts an RNN's recurrent weight W_hh with a spectral radius of about 1/sqrt(3), and
its gradient vanishes with distance (lessonlib.experiments.gradient_reach). Rescale W_hh to a
spectral radius well above 1 and the gradient grows with distance instead: measure it with
gradient_reach(..., radius=RADIUS). `train` shows what that does to learning: the memory task's
RNN with W_hh at RADIUS, trained with plain SGD (no per-parameter step normalisation, unlike
Adam) with and without clipping the gradient norm, recording every step's loss and gradient
norm. Everything else is the memory task's: its data, seeds, batches and validation set.

Why these settings (measured over seeds 0-5, 600 steps, SGD at lr 1): at radius 3 and length 15
no seed solved the task without clipping (its loss ended above chance), and five
of six did with the norm clipped to 1, within 200 steps. Which seeds solve is fragile, as
training in this chaotic regime is: scaling W_hh by a further 1 + 1e-6 made it six of six with
clipping (still none without). The comparison is not fragile: at radius 2 or 3, lengths 15 or
20 and lr 1, each with and without that nudge, clipping always solved more seeds, 3 to 6 of
six against 0 to 3 without it. Small steps need no clipping: at lr 0.1 every seed learned
length 15 without it, so the failure takes steps big enough to throw the weights off the cliffs
that large recurrent weights make in the loss.
"""
from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

import torch
from torch import Tensor

from lessonlib.device import steady_cpu
from lessonlib.experiments import memory_task
from lessonlib.models.batched_rnn import BatchedRNNClassifier
from lessonlib.models.rnn import set_spectral_radius

RADIUS = 3.0  # spectral radius of W_hh for the exploding RNN
LENGTH = 15  # memory-task length: past where PyTorch's start learns under the course's protocol
SEEDS = (0, 1, 2, 3, 4, 5)
# plain SGD, no clipping; 300 steps: the clipped runs that solve do so within 200
SGD = dataclasses.replace(memory_task.PROTOCOL, lr=1.0, clip=math.inf, steps=300)
CLIPPED = dataclasses.replace(SGD, clip=1.0)  # the same, with the norm clipped to 1 as in the course


class Trace(NamedTuple):
    loss: Tensor  # (steps, M): each model's training loss at every step
    grad_norm: Tensor  # (steps, M): each model's gradient norm at every step, before clipping
    accuracy: list[float]  # each model's validation accuracy at the end


def train(
    length: int = LENGTH,
    seeds: tuple[int, ...] = SEEDS,
    protocol: memory_task.MemoryProtocol = SGD,
    radius: float | None = RADIUS,
    optimizer: str = "sgd",
    device: torch.device | str = "cpu",
) -> Trace:
    """Train the memory task's RNN, one per seed, for all protocol.steps steps (no early stop).

    `radius` rescales each W_hh to that spectral radius (None: PyTorch's start); `optimizer` is
    "sgd" or "adam", at protocol.lr; protocol.clip is the gradient-norm clip (math.inf: none).
    """
    models = [memory_task.build("rnn", seed, protocol) for seed in seeds]
    if radius is not None:
        for model in models:
            set_spectral_radius(model.rnn, radius)
    group = BatchedRNNClassifier(models).to(device)
    optimizers = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam}
    opt = optimizers[optimizer](group.parameters(), lr=protocol.lr)
    generators = memory_task.data_streams(seeds)
    losses, norms = [], []
    with steady_cpu(device):
        for _ in range(protocol.steps):
            _, _, loss, norm = memory_task.train_step(group, opt, generators, length, protocol, device)
            losses.append(loss)
            norms.append(norm.detach())
        val_tokens, val_labels = memory_task.validation_set(length, protocol, device)
        accuracy = memory_task.accuracies(group, val_tokens, val_labels, len(seeds))
    return Trace(torch.stack(losses).cpu(), torch.stack(norms).cpu(), accuracy)
