"""The recurrence models (linear attention, minGRU, gated linear attention, selective SSM): each
one's recurrent (generation) form against its parallel (training) form, and minGRU against the
paper's equations by hand."""
import math

import pytest
import torch
from torch.testing import assert_close

from lessonlib.models.gated_linear_attention import GatedLinearAttention
from lessonlib.models.linear_attention import LinearAttention
from lessonlib.models.min_gru import MinGRU, g, log_g
from lessonlib.models.selective_ssm import SelectiveSSM
from lessonlib.models.transformer import Transformer

F64 = torch.float64
MODELS = {
    "linear_attention": lambda: LinearAttention(5, 6, key_size=4),
    "min_gru": lambda: MinGRU(5, 6),
    "min_gru_log": lambda: MinGRU(5, 6, log_space=True),
    "gla": lambda: GatedLinearAttention(5, 6, key_size=4),
    "selective_ssm": lambda: SelectiveSSM(5, 6, state_size=3),
}


def model_and_input(name: str, device, T: int = 23):
    torch.manual_seed(0)
    model = MODELS[name]().to(device, F64)
    x = torch.randn(2, T, 5, dtype=F64, device=device)
    return model, x


def run_steps(model, x: torch.Tensor, state=None):
    """The recurrent form along x (B, T, I): one step per token -> outs (B, T, H), final state."""
    outs = []
    for t in range(x.shape[1]):
        out, state = model.step(x[:, t], state)
        outs.append(out)
    return torch.stack(outs, 1), state


@pytest.mark.parametrize("name", list(MODELS))
def test_recurrent_form_equals_parallel_form(name, device):
    model, x = model_and_input(name, device)
    out, state = model(x)
    assert out.shape == (2, 23, 6)
    step_out, step_state = run_steps(model, x)
    assert_close(step_out, out, rtol=1e-10, atol=1e-12)
    assert_close(step_state, state, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", list(MODELS))
def test_parallel_form_continues_from_a_state(name, device):
    """Two calls, the second starting from the first's final state, give one call's result."""
    model, x = model_and_input(name, device)
    out, state = model(x)
    first, mid = model(x[:, :9])
    second, end = model(x[:, 9:], mid)
    assert_close(torch.cat([first, second], 1), out, rtol=1e-10, atol=1e-12)
    assert_close(end, state, rtol=1e-10, atol=1e-12)
    # and the recurrent form takes over from the parallel one
    step_out, step_state = run_steps(model, x[:, 9:], mid)
    assert_close(step_out, second, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", list(MODELS))
def test_gradients_of_the_two_forms_agree(name):
    """Training through the parallel form gives the gradients of the loop: every parameter gets one."""
    model, x = model_and_input(name, "cpu")
    weights = torch.randn(2, 23, 6, dtype=F64)

    def grads(outputs):
        (outputs * weights).sum().backward()
        got = {pname: p.grad.clone() for pname, p in model.named_parameters()}
        model.zero_grad(set_to_none=True)
        return got

    parallel = grads(model(x)[0])
    recurrent = grads(run_steps(model, x)[0])
    for pname, grad in parallel.items():
        assert grad.abs().sum() > 0, pname
        assert_close(grad, recurrent[pname], rtol=1e-9, atol=1e-12, msg=pname)


@pytest.mark.parametrize("name", ["linear_attention", "min_gru", "min_gru_log"])
@pytest.mark.parametrize("last", [1, 4])
def test_the_last_positions_alone_equal_the_end_of_the_whole_output(name, last, device):
    """`last` (what the memory task's classifier reads) computes less, and the same outputs, state and
    gradients as the whole sequence's output cut to its end."""
    model, x = model_and_input(name, device)
    out, state = model(x)
    end, end_state = model(x, last=last)
    assert end.shape == (2, last, 6)
    assert_close(end, out[:, -last:], rtol=1e-10, atol=1e-12)
    assert_close(end_state, state, rtol=1e-10, atol=1e-12)
    _, mid = model(x[:, :9])  # from a carried state too
    assert_close(model(x[:, 9:], mid, last=last)[0], out[:, -last:], rtol=1e-10, atol=1e-12)
    weights = torch.randn(2, last, 6, dtype=F64, device=device)
    whole = torch.autograd.grad((out[:, -last:] * weights).sum(), list(model.parameters()))
    alone = torch.autograd.grad((end * weights).sum(), list(model.parameters()))
    for want, got in zip(whole, alone):
        assert_close(got, want, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("name", ["linear_attention", "min_gru", "min_gru_log", "transformer"])
def test_last_below_one_is_refused_in_one_line(name, device):
    # x[:, -0:] is every position: without the check, last=0 would quietly return them all
    if name == "transformer":
        model, x = Transformer(6, heads=2, layers=1, d_in=5, positions="sinusoidal").to(device, F64), model_and_input("min_gru", device)[1]
    else:
        model, x = model_and_input(name, device)
    with pytest.raises(ValueError, match="last must be at least 1"):
        model(x, last=0)


# linear attention


def test_linear_attention_matrix_scan_and_loop_agree(device):
    model, x = model_and_input("linear_attention", device)
    out, S = model(x)  # masked matrix product
    scan_out, scan_S = model.forward_scan(x)  # the recurrence, as a parallel scan
    loop_out, loop_S = run_steps(model, x)  # the recurrence, one token at a time
    for got, got_S in ((scan_out, scan_S), (loop_out, loop_S)):
        assert_close(got, out, rtol=1e-10, atol=1e-12)
        assert_close(got_S, S, rtol=1e-10, atol=1e-12)
    # and it is causal attention with raw scores: out_t = sum_{s<=t} (q_t . k_s) v_s
    q, k, v = model.qkv(x)
    t = 7
    want = sum((q[:, t] * k[:, s]).sum(-1, keepdim=True) * v[:, s] for s in range(t + 1))
    assert_close(out[:, t], want, rtol=1e-10, atol=1e-12)


def test_normalised_linear_attention_is_katharopoulos_weighted_average_in_every_form(device):
    model, x = model_and_input("linear_attention", device)
    model.normalised = True
    out, S = model(x)
    for got, got_S in (model.forward_scan(x), run_steps(model, x)):
        assert_close(got, out, rtol=1e-10, atol=1e-12)
        assert_close(got_S, S, rtol=1e-10, atol=1e-12)
    # out_t = sum_s phi(q_t).phi(k_s) v_s / sum_s phi(q_t).phi(k_s), phi = elu + 1, s <= t
    phi = lambda z: torch.nn.functional.elu(z) + 1  # noqa: E731
    q, k, v = phi(model.query(x)), phi(model.key(x)), model.value(x)
    t = 7
    weights = torch.stack([(q[:, t] * k[:, s]).sum(-1) for s in range(t + 1)], -1)  # (B, t + 1), all positive
    assert (weights > 0).all()
    want = (weights.unsqueeze(-1) * v[:, : t + 1]).sum(1) / weights.sum(-1, keepdim=True)
    assert_close(out[:, t], want, rtol=1e-10, atol=1e-12)


def test_linear_attention_state_has_a_fixed_size():
    model, x = model_and_input("linear_attention", "cpu", T=50)
    _, S_short = model(x[:, :5])
    _, S_long = model(x)
    assert S_short.shape == S_long.shape == (2, 4, 6)  # d_k x H, whatever the length


# minGRU, by hand: a 2-unit example, one test per equation of Feng et al. (2024)
#   x_1 = (1, -1), x_2 = (0, 0), h_0 = (1, 2)
#   Linear_z: W = diag(1, 2), bias 0      -> k_1 = (1, -2)
#   Linear_h: W = diag(2, 1), bias (0.5, 0) -> h~_1 = (2.5, -1), h~_2 = (0.5, 0)

X = [[[1.0, -1.0], [0.0, 0.0]]]  # (B=1, T=2, I=2)
H0 = [[1.0, 2.0]]
SIG1, SIG_2 = 0.7310585786300049, 0.11920292202211755  # sigmoid(1), sigmoid(-2)


def hand_min_gru(log_space: bool = False) -> MinGRU:
    model = MinGRU(2, 2, log_space=log_space).to(F64)
    with torch.no_grad():
        model.linear_z.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 2.0]]))
        model.linear_z.bias.zero_()
        model.linear_h.weight.copy_(torch.tensor([[2.0, 0.0], [0.0, 1.0]]))
        model.linear_h.bias.copy_(torch.tensor([0.5, 0.0]))
    return model


def t64(values) -> torch.Tensor:
    return torch.tensor(values, dtype=F64)


def test_min_gru_update_gate_is_sigmoid_of_a_linear_map_of_x():
    """z_t = sigmoid(Linear_z(x_t)): (sigmoid(1), sigmoid(-2)) = (0.7311, 0.1192); and 1 - z_t is a_t."""
    model = hand_min_gru()
    z, _ = model.gates(t64(X))
    assert_close(z[0, 0], t64([SIG1, SIG_2]), rtol=0, atol=1e-12)
    assert_close(z[0, 1], t64([0.5, 0.5]), rtol=0, atol=1e-12)
    a, _ = model.coefficients(t64(X))
    assert_close(a[0, 0], t64([1 - SIG1, 1 - SIG_2]), rtol=0, atol=1e-12)


def test_min_gru_candidate_is_a_linear_map_of_x():
    """h~_t = Linear_h(x_t), no tanh: (2 * 1 + 0.5, 1 * -1 + 0) = (2.5, -1)."""
    model = hand_min_gru()
    _, h_tilde = model.gates(t64(X))
    assert_close(h_tilde[0, 0], t64([2.5, -1.0]), rtol=0, atol=1e-12)
    assert_close(h_tilde[0, 1], t64([0.5, 0.0]), rtol=0, atol=1e-12)


def test_min_gru_state_mixes_old_state_and_candidate():
    """h_t = (1 - z_t) h_{t-1} + z_t h~_t:
    h_1 = (0.2689 * 1 + 0.7311 * 2.5, 0.8808 * 2 + 0.1192 * -1) = (2.0966, 1.6424)
    h_2 = (0.5 * 2.0966 + 0.5 * 0.5, 0.5 * 1.6424 + 0.5 * 0) = (1.2983, 0.8212)"""
    model = hand_min_gru()
    h1 = [(1 - SIG1) * 1 + SIG1 * 2.5, (1 - SIG_2) * 2 + SIG_2 * -1]
    assert_close(t64(h1), t64([2.0965878679450074, 1.6423912339336473]), rtol=0, atol=1e-12)
    h2 = [1.2982939339725037, 0.8211956169668236]
    out, state = model(t64(X), t64(H0))  # the parallel form
    assert_close(out[0], t64([h1, h2]), rtol=0, atol=1e-12)
    assert_close(state[0], t64(h2), rtol=0, atol=1e-12)
    step_h1, _ = model.step(t64(X)[:, 0], t64(H0))  # the recurrent form
    assert_close(step_h1[0], t64(h1), rtol=0, atol=1e-12)


def test_min_gru_g_keeps_the_candidate_positive():
    """The log-space variant's g: x + 0.5 for x >= 0, sigmoid(x) below; g(2.5) = 3, g(-1) = 0.2689."""
    x = t64([2.5, 0.0, -1.0, -30.0])
    assert_close(g(x), t64([3.0, 0.5, 1 - SIG1, 1 / (1 + math.exp(30))]), rtol=1e-12, atol=0)
    assert_close(log_g(x), g(x).log(), rtol=1e-12, atol=0)
    assert (g(torch.linspace(-50, 50, 101, dtype=F64)) > 0).all()


def test_min_gru_log_space_follows_the_equations_with_g():
    """log-space minGRU: h~ = g(Linear_h(x)) = (g(2.5), g(-1)) = (3, 0.2689), then the same state update:
    h_1 = (0.2689 * 1 + 0.7311 * 3, 0.8808 * 2 + 0.1192 * 0.2689) = (2.4621, 1.7937)
    h_2 = (0.5 * 2.4621 + 0.5 * g(0.5), 0.5 * 1.7937 + 0.5 * g(0)) = (1.7311, 1.1468)"""
    model = hand_min_gru(log_space=True)
    out, _ = model(t64(X), t64(H0))
    assert_close(out[0], t64([[2.46211715726001, 1.7936527592358498], [1.731058578630005, 1.146826379617925]]),
                 rtol=0, atol=1e-12)


def test_min_gru_decay_bias_starts_open():
    model = MinGRU(3, 4, decay_bias=-3.0)
    a, _ = model.coefficients(torch.zeros(1, 1, 3))
    assert_close(a, torch.full((1, 1, 4), 1 - 1 / (1 + math.exp(3))))  # 1 - sigmoid(-3) = 0.9526


def test_gla_decay_starts_open_and_ssm_decay_is_below_one():
    a, _ = GatedLinearAttention(3, 4, decay_bias=3.0).coefficients(torch.zeros(1, 1, 3))
    assert_close(a, torch.full_like(a, 1 / (1 + math.exp(-3))))  # sigmoid(3) = 0.9526
    torch.manual_seed(0)
    a, _ = SelectiveSSM(3, 4, state_size=2).coefficients(torch.randn(1, 10, 3))
    assert ((a > 0.5) & (a < 1)).all()  # delta starts in [0.001, 0.1]: a = exp(-delta (n + 1)) near 1


def test_memory_task_builds_them_with_the_decay_open():
    from lessonlib.experiments.memory_task import RECURRENCE, build
    assert set(RECURRENCE) == {"min_gru", "linear_attention", "gla", "selective_ssm"}
    assert (build("min_gru", 0).rnn.linear_z.bias == -3.0).all() and build("min_gru", 0).rnn.log_space
    assert (build("gla", 0).rnn.gate.bias == 3.0).all()


def test_the_closed_control_differs_from_min_gru_only_in_its_gate_bias():
    from lessonlib.experiments.memory_task import build
    opened, closed = build("min_gru", 0).state_dict(), build("min_gru_closed", 0).state_dict()
    assert opened.keys() == closed.keys()
    differ = [name for name in opened if not torch.equal(opened[name], closed[name])]
    assert differ == ["rnn.linear_z.bias"]
    assert (closed["rnn.linear_z.bias"] == 3.0).all()  # 1 - sigmoid(3): keeps about 0.05 per step
    assert build("min_gru_closed", 0).rnn.log_space
