"""The GRU of lesson 1: opening its update gate, the shared gate-bias helper, and the memory
task's GRU models."""
import math

import pytest
import torch
from torch import nn

from lessonlib.experiments import memory_task
from lessonlib.models.gru import GRU, open_update_gate
from lessonlib.models.lstm import open_forget_gate
from lessonlib.models.rnn import set_gate_bias


def update_gate(gru: nn.GRU, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """z from PyTorch's documented formula, z = sigmoid(W_iz x + b_iz + W_hz h + b_hz)."""
    H = gru.hidden_size
    z = slice(H, 2 * H)
    return torch.sigmoid(x @ gru.weight_ih_l0[z].T + gru.bias_ih_l0[z] + h @ gru.weight_hh_l0[z].T + gru.bias_hh_l0[z])


@pytest.mark.parametrize("make", [lambda: GRU(4, 5), lambda: nn.GRU(4, 5)], ids=["ours", "torch"])
def test_open_update_gate_moves_only_the_update_biases(make):
    gru = make()
    H = 5
    before = {n: p.detach().clone() for n, p in gru.named_parameters()}
    assert open_update_gate(gru) is gru
    for name in ("bias_ih_l0", "bias_hh_l0"):
        b, old = getattr(gru, name).detach(), before[name]
        assert torch.equal(b[H : 2 * H], torch.full((H,), 1.5))
        assert torch.equal(b[:H], old[:H]) and torch.equal(b[2 * H :], old[2 * H :])  # r and n untouched
    for name in ("weight_ih_l0", "weight_hh_l0"):
        assert torch.equal(getattr(gru, name), before[name])


def test_an_open_update_gate_keeps_the_state():
    gru = open_update_gate(nn.GRU(4, 5))
    zeros_x, zeros_h = torch.zeros(1, 4), torch.zeros(1, 5)
    torch.testing.assert_close(update_gate(gru, zeros_x, zeros_h), torch.full((1, 5), 1 / (1 + math.exp(-3.0))))
    # and the layer itself keeps most of a state: h' = (1 - z) n + z h with z near 0.95
    h0 = torch.ones(1, 1, 5)
    _, h1 = gru(torch.zeros(1, 1, 4), h0)
    z = update_gate(gru, zeros_x, h0[0])
    assert (h1 - z * h0).abs().max() <= (1 - z).max() + 1e-6  # the candidate only fills the rest
    assert (h1 > 0.9 * z * h0 - 1e-6).all()


def test_set_gate_bias_covers_every_layer_and_direction():
    gru = nn.GRU(3, 4, num_layers=2, bidirectional=True)
    set_gate_bias(gru, 2, -1.0)
    biases = [p for n, p in gru.named_parameters() if n.startswith("bias_")]
    assert len(biases) == 8
    for b in biases:
        assert torch.equal(b[8:12].detach(), torch.full((4,), -1.0))
    with pytest.raises(ValueError):
        set_gate_bias(nn.GRU(3, 4, bias=False), 1, 1.0)


def test_each_open_helper_accepts_only_its_own_cell():
    with pytest.raises(TypeError):
        open_update_gate(nn.LSTM(3, 4))  # its second slice is the forget gate
    with pytest.raises(TypeError):
        open_forget_gate(nn.GRU(3, 4))  # its second slice is the update gate
    with pytest.raises(ValueError):
        open_update_gate(nn.GRU(3, 4, bias=False))


def test_memory_task_gru_models(device):
    tokens, _ = memory_task.make_batch(8, 12, torch.Generator().manual_seed(0), device)
    default, opened = memory_task.build("gru", 0, device=device), memory_task.build("gru_open", 0, device=device)
    assert isinstance(default.rnn, nn.GRU) and isinstance(opened.rnn, nn.GRU)
    assert default(tokens).shape == opened(tokens).shape == (8, memory_task.CLUES)
    H = memory_task.PROTOCOL.hidden
    for name in ("bias_ih_l0", "bias_hh_l0"):
        assert (getattr(opened.rnn, name)[H : 2 * H] == 1.5).all()
    # the same seed draws the same weights: only the update-gate biases differ
    differing = [n for n, p in default.state_dict().items() if not torch.equal(p, opened.state_dict()[n])]
    assert differing == ["rnn.bias_ih_l0", "rnn.bias_hh_l0"]
