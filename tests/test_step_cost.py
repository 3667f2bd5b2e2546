"""step_cost's multiply-add counts against torch's own FLOP counter."""
import warnings

import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from lessonlib.experiments import step_cost
from lessonlib.models.attention import dot_product_attention

CELLS = {"rnn": nn.RNNCell, "gru": nn.GRUCell, "lstm": nn.LSTMCell}
LAYERS = {"rnn": nn.RNN, "gru": nn.GRU, "lstm": nn.LSTM}


def counted_macs(fn) -> int:
    """Multiply-adds in fn() as torch's FLOP counter sees them (it counts one as 2 FLOPs).

    oneDNN's fused LSTM kernel is opaque to the counter, so it is switched off: torch then runs
    the same matrix products one by one, where the counter sees each."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # oneDNN's note that this build has no TF32
        with torch.backends.mkldnn.flags(enabled=False), FlopCounterMode(display=False) as counter:
            fn()
    flops = counter.get_total_flops()
    assert flops > 0 and flops % 2 == 0, flops
    return flops // 2


@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("d", [8, 64])
def test_rnn_step_macs_match_torch_flop_counter(cell, d):
    step = CELLS[cell](d, d)
    x, h = torch.randn(1, d), torch.randn(1, d)
    state = (h, h) if cell == "lstm" else h
    macs = step_cost.step_macs([1, 10, 100_000], d, cell=cell)
    assert (macs["rnn"] == counted_macs(lambda: step(x, state))).all()  # whatever the prefix length


@pytest.mark.parametrize("d", [8, 64])
def test_attention_step_macs_match_torch_flop_counter(d):
    n = [1, 2, 7, 100, 1000]
    q = torch.randn(1, 1, d)  # the new token's query
    counted = []
    for length in n:
        k, v = torch.randn(1, length, d), torch.randn(1, length, d)  # the prefix's keys and values
        counted.append(counted_macs(lambda: dot_product_attention(q, k, v)))
    assert step_cost.step_macs(n, d)["attention"].tolist() == counted


def test_family_macs_ratios_match_torch_flop_counter():
    # forward and backward of a whole sequence: GATES counts one matrix product per gate
    x = torch.randn(2, 5, 8, requires_grad=True)

    def fwd_bwd(layer: nn.Module) -> None:
        out, _ = layer(x)
        out.sum().backward()

    macs = {name: counted_macs(lambda: fwd_bwd(cls(8, 8, batch_first=True))) for name, cls in LAYERS.items()}
    assert {name: step_cost.GATES[name] / step_cost.GATES["rnn"] for name in LAYERS} == \
        {name: macs[name] / macs["rnn"] for name in LAYERS}
