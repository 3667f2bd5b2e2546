"""Exploding gradients and clipping: the recurrent weight's spectral radius, the gradient it
makes grow with distance, and the training step that clips each model's gradient on its own."""
import dataclasses
import math

import numpy as np
import pytest
import torch
from torch import nn

from lessonlib.experiments import exploding, memory_task
from lessonlib.experiments.gradient_reach import gradient_reach, log_line
from lessonlib.models.batched_rnn import BatchedRNNClassifier
from lessonlib.models.rnn import RNN, set_spectral_radius, spectral_radius


@pytest.mark.parametrize("make", [lambda: nn.RNN(5, 7), lambda: RNN(5, 7)], ids=["torch", "ours"])
def test_set_spectral_radius_scales_only_the_recurrent_weight(make):
    layer = make()
    before = {name: p.detach().clone() for name, p in layer.named_parameters()}
    assert set_spectral_radius(layer, 2.5) is layer
    # an independent eigenvalue computation (NumPy's), and the direction of W_hh unchanged
    eigenvalues = np.linalg.eigvals(layer.weight_hh_l0.detach().double().numpy())
    assert np.abs(eigenvalues).max() == pytest.approx(2.5, rel=1e-6)
    scale = (layer.weight_hh_l0 / before["weight_hh_l0"]).detach()
    torch.testing.assert_close(scale, torch.full_like(scale, scale[0, 0].item()))
    for name in ("weight_ih_l0", "bias_ih_l0", "bias_hh_l0"):
        assert torch.equal(getattr(layer, name), before[name])
    assert spectral_radius(layer.weight_hh_l0) == pytest.approx(2.5, rel=1e-6)


def test_spectral_radius_of_known_matrices():
    rotation = torch.tensor([[0.0, -2.0], [2.0, 0.0]])  # eigenvalues +-2i
    assert spectral_radius(rotation) == pytest.approx(2.0)
    assert spectral_radius(torch.diag(torch.tensor([0.5, -3.0, 1.0]))) == pytest.approx(3.0)


def test_large_recurrent_weights_make_the_gradient_grow_with_distance(device):
    default = gradient_reach("rnn", 40, (0, 1), device)
    big = gradient_reach("rnn", 40, (0, 1), device, radius=3.0)
    assert log_line(default).factor < 0.7  # PyTorch's start: it vanishes
    assert log_line(big).factor > 1.1  # spectral radius 3: it explodes
    assert big[-1] / big[0] > 1e3 and default[-1] / default[0] < 1e-6
    with pytest.raises(ValueError, match="not the RNN"):
        gradient_reach("lstm", 10, (0,), device, radius=3.0)


def test_train_step_clips_each_model_on_its_own(device):
    """The norms train_step reports are those torch's clip_grad_norm_ finds for each model alone,
    and with clipping at c an SGD step at lr 1 moves each model's weights by at most c."""
    seeds, length, clip = (0, 1, 2), 12, 0.01
    protocol = dataclasses.replace(memory_task.PROTOCOL, clip=clip)
    models = [memory_task.build("rnn", s) for s in seeds]
    for m in models:
        set_spectral_radius(m.rnn, 3.0)
    reference = [memory_task.build("rnn", s, device=device) for s in seeds]  # torch's nn.RNN, on the same device
    for ours, ref in zip(models, reference):
        ref.load_state_dict(ours.state_dict())
    group = BatchedRNNClassifier(models).to(device)
    before = [p.detach().clone() for p in group.parameters()]
    generators = memory_task.data_streams(seeds)
    opt = torch.optim.SGD(group.parameters(), lr=1.0)
    _, labels, losses, norms = memory_task.train_step(group, opt, generators, length, protocol, device)
    # the same batches, drawn again, through each reference model on its own
    batches = [memory_task.make_batch(protocol.batch, length, g, device) for g in memory_task.data_streams(seeds)]
    for m, (ref, (tokens, y)) in enumerate(zip(reference, batches)):
        with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):  # full fp32 for nn.RNN on a GPU
            loss = nn.functional.cross_entropy(ref(tokens), y)
            loss.backward()
        expected = nn.utils.clip_grad_norm_(ref.parameters(), math.inf)
        assert torch.equal(labels[m], y)
        torch.testing.assert_close(losses[m], loss.detach(), rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(norms[m], expected, rtol=1e-3, atol=1e-5)
        assert expected > 10 * clip  # so the clip did act
        moved = torch.cat([(p.detach() - b)[m].flatten() for p, b in zip(group.parameters(), before)]).norm()
        assert moved == pytest.approx(clip, rel=1e-3)


def test_training_trace_and_the_clipping_contrast(device):
    if device.type != "cpu":
        pytest.skip("which seeds solve is fragile in this regime; the pattern is a CPU-build promise")
    seeds = exploding.SEEDS
    unclipped = exploding.train(seeds=seeds, protocol=exploding.SGD, device=device)
    clipped = exploding.train(seeds=seeds, protocol=exploding.CLIPPED, device=device)
    steps = exploding.SGD.steps
    assert unclipped.loss.shape == unclipped.grad_norm.shape == (steps, len(seeds)) and len(unclipped.accuracy) == len(seeds)
    assert torch.equal(unclipped.grad_norm[0], clipped.grad_norm[0])  # same start, same first batch
    solved = memory_task.PROTOCOL.solved
    assert sum(a >= solved for a in unclipped.accuracy) <= 1
    assert (unclipped.loss[-50:].mean(0) > math.log(2)).all()  # diverged: worse than guessing
    assert sum(a >= solved for a in clipped.accuracy) >= len(seeds) - 2


def test_adam_at_the_default_start_rarely_reaches_the_clip(device):
    short = dataclasses.replace(memory_task.PROTOCOL, steps=200)
    trace = exploding.train(10, (0, 1), short, radius=None, optimizer="adam", device=device)
    assert (trace.grad_norm > short.clip).float().mean() < 0.05
    assert trace.grad_norm.max() < 3 * short.clip  # and when it does, only just
