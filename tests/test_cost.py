"""cost.count against counts done by hand, on programs small enough to count."""
import math

import pytest
import torch

from lessonlib.experiments import cost, memory_task, sequence_cost
from lessonlib.models.rnn import RNN
from lessonlib.models.scan import scan_loop, scan_parallel


def test_an_elementwise_chain_is_one_step_per_operation_however_wide():
    for n in (1, 1000):
        x = torch.randn(n)
        assert cost.count(lambda: (x * 2 + 1).tanh()) == cost.Cost(3, 3 * n)


def test_combining_n_numbers_is_a_tree_of_pairs():
    x = torch.randn(8)
    assert cost.count(lambda: x.sum()) == cost.Cost(3, 7)  # 4 + 2 + 1 additions in 3 rounds
    assert cost.count(lambda: torch.randn(5).sum()) == cost.Cost(3, 4)
    assert cost.count(lambda: x[:1].sum()) == cost.Cost(0, 0)


def test_a_matrix_product_multiplies_at_once_then_adds_in_a_tree():
    a, b, bias = torch.randn(4, 16), torch.randn(16, 3), torch.randn(3)
    assert cost.count(lambda: a @ b) == cost.Cost(1 + 4, 4 * 3 * (16 + 15))
    assert cost.count(lambda: torch.addmm(bias, a, b)) == cost.Cost(1 + 4 + 1, 4 * 3 * (16 + 16))
    assert cost.count(lambda: torch.randn(2, 4, 16) @ torch.randn(2, 16, 3)).sequential_steps == 5


def test_a_chain_waits_and_independent_work_does_not():
    x = torch.randn(10)
    assert cost.count(lambda: (x * 2, x + 1, x.exp())).sequential_steps == 1
    assert cost.count(lambda: x.mul(2).add_(1).exp_()) == cost.Cost(3, 30)  # in place, still a chain
    deep = x.clone()
    with cost._Counter() as counter:
        for _ in range(4):
            deep = deep * 2
        out = deep[3:5] + 1  # a slice of a deep tensor is as deep as the tensor
    assert counter.depth_of(out) == 5


@pytest.mark.parametrize("T", [1, 2, 3, 8, 100])
def test_the_loop_waits_on_every_step_and_the_scan_on_every_round(T):
    a, b = torch.rand(2, T, 3), torch.rand(2, T, 3)
    assert cost.count(lambda: scan_loop(a, b)).sequential_steps == 2 * T  # a multiply, then an add
    # h_0 folded in (2), then per round A * B and A * A at once, then + B (2)
    assert cost.count(lambda: scan_parallel(a, b)).sequential_steps == 2 + 2 * math.ceil(math.log2(T))


def test_a_recurrent_network_adds_the_same_steps_per_position():
    torch.manual_seed(0)
    rnn = RNN(4, 8, batch_first=True)
    steps = [cost.count(lambda: rnn(torch.randn(1, L, 4))[0]).sequential_steps for L in (1, 2, 10)]
    per_position = steps[1] - steps[0]
    assert per_position > 0 and steps == [steps[0] + (L - 1) * per_position for L in (1, 2, 10)]


def test_the_memory_task_transformer_grows_with_log_length_and_the_lstm_linearly():
    steps = {}
    for name in ("lstm", "transformer"):
        model = memory_task.build(name, 0)
        steps[name] = [cost.count(lambda: sequence_cost.every_position(
            model, torch.zeros(1, L, dtype=torch.long), written_out=True)).sequential_steps for L in (16, 32, 64)]
    lstm, tf = steps["lstm"], steps["transformer"]
    assert lstm[2] - lstm[1] == 2 * (lstm[1] - lstm[0]) > 0  # the same steps per position
    assert tf[2] - tf[1] == tf[1] - tf[0] > 0  # a few steps per doubling: the sums over positions


def test_an_operation_without_a_rule_is_refused_not_guessed():
    x = torch.randn(4, 4)
    with pytest.raises(NotImplementedError, match="no rule for aten.linalg_inv"):
        cost.count(lambda: torch.linalg.inv(x))


def test_torchs_own_cells_are_counted_their_gates_side_by_side():
    x, h = torch.randn(1, 8), torch.randn(1, 8)
    cells = {name: cell(8, 8) for name, cell in (("rnn", torch.nn.RNNCell), ("gru", torch.nn.GRUCell),
                                                  ("lstm", torch.nn.LSTMCell))}
    steps = {"rnn": cost.count(lambda: cells["rnn"](x, h)), "gru": cost.count(lambda: cells["gru"](x, h)),
             "lstm": cost.count(lambda: cells["lstm"](x, (h, h)))}
    # 1 + ceil(log2 8) for the product, +1 for its bias, then the gates' elementwise steps
    assert steps["rnn"].sequential_steps == 7
    assert steps["rnn"].sequential_steps < steps["lstm"].sequential_steps < 3 * steps["rnn"].sequential_steps
