"""The hand-written RNN, LSTM and GRU against torch.nn's: values, gradients, layout, gates."""
import math

import pytest
import torch
from torch import nn
from torch.testing import assert_close

from lessonlib.models.gru import GRU
from lessonlib.models.lstm import LSTM, open_forget_gate
from lessonlib.models.rnn import RNN

CELLS = [
    pytest.param(RNN, nn.RNN, id="rnn"),
    pytest.param(LSTM, nn.LSTM, id="lstm"),
    pytest.param(GRU, nn.GRU, id="gru"),
]
# (input, hidden, batch, length): the smallest case, a large one, and one in between
SIZES = [(3, 2, 1, 1), (17, 33, 5, 25), (8, 5, 3, 7)]
F64 = torch.float64


def random_state(torch_cls, batch: int, hidden: int, device) -> torch.Tensor | tuple[torch.Tensor, ...]:
    """A non-zero initial state in the form the module takes: h0, or (h0, c0) for the LSTM."""
    n = 2 if torch_cls is nn.LSTM else 1
    state = tuple(torch.randn(1, batch, hidden, dtype=F64, device=device, requires_grad=True)
                  for _ in range(n))
    return state if n == 2 else state[0]


def flat(result) -> list[torch.Tensor]:
    """(out, h_n) or (out, (h_n, c_n)) -> [out, h_n, (c_n)]."""
    out, state = result
    return [out, *state] if isinstance(state, tuple) else [out, state]


@pytest.mark.parametrize("ours_cls, torch_cls", CELLS)
@pytest.mark.parametrize("sizes", SIZES, ids=lambda s: "I{}-H{}-B{}-T{}".format(*s))
@pytest.mark.parametrize("batch_first", [False, True], ids=["time_first", "batch_first"])
@pytest.mark.parametrize("with_state", [False, True], ids=["zero_state", "given_state"])
def test_matches_torch_values_and_gradients(ours_cls, torch_cls, sizes, batch_first, with_state, device):
    I, H, B, T = sizes
    torch.manual_seed(0)
    ref = torch_cls(I, H, batch_first=batch_first, device=device, dtype=F64)
    ours = ours_cls.from_torch(ref)
    x = torch.randn((B, T, I) if batch_first else (T, B, I), dtype=F64, device=device, requires_grad=True)
    state = random_state(torch_cls, B, H, device) if with_state else None
    args = (x,) if state is None else (x, state)

    got, want = flat(ours(*args)), flat(ref(*args))
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape
        assert_close(g, w, atol=1e-6, rtol=0)

    # gradients of a random projection of every output, w.r.t. input, state and each parameter
    proj = [torch.randn_like(w) for w in want]
    names = [name for name, _ in ref.named_parameters()]
    state_tensors = [] if state is None else list(state) if isinstance(state, tuple) else [state]
    wrt_ours = [x, *state_tensors, *(getattr(ours, n) for n in names)]
    wrt_ref = [x, *state_tensors, *(getattr(ref, n) for n in names)]
    grads_ours = torch.autograd.grad(sum((g * p).sum() for g, p in zip(got, proj)), wrt_ours)
    grads_ref = torch.autograd.grad(sum((w * p).sum() for w, p in zip(want, proj)), wrt_ref)
    for g, w in zip(grads_ours, grads_ref, strict=True):
        assert_close(g, w, atol=1e-6, rtol=0)


@pytest.mark.parametrize("ours_cls, torch_cls", CELLS)
def test_unbatched_input_matches_torch(ours_cls, torch_cls, device):
    torch.manual_seed(0)
    ref = torch_cls(4, 6, device=device, dtype=F64)
    ours = ours_cls.from_torch(ref)
    x = torch.randn(9, 4, dtype=F64, device=device)  # (T, I)
    state = random_state(torch_cls, 1, 6, device)  # (1, 1, H) -> unbatched (1, H)
    state = tuple(s[:, 0] for s in state) if isinstance(state, tuple) else state[:, 0]
    for args in [(x,), (x, state)]:
        got, want = flat(ours(*args)), flat(ref(*args))
        assert [g.shape for g in got] == [w.shape for w in want] == [(9, 6)] + [(1, 6)] * (len(want) - 1)
        for g, w in zip(got, want, strict=True):
            assert_close(g, w, atol=1e-6, rtol=0)


@pytest.mark.parametrize("ours_cls, torch_cls", CELLS)
def test_from_torch_copies_weights_dtype_device_and_layout(ours_cls, torch_cls, device):
    ref = torch_cls(5, 3, batch_first=True, device=device, dtype=F64)
    ours = ours_cls.from_torch(ref)
    assert ours.batch_first is True
    for name, p in ref.named_parameters():
        q = getattr(ours, name)
        assert (q.dtype, q.device, q.shape) == (p.dtype, p.device, p.shape)
        assert torch.equal(q, p)
        assert q.data_ptr() != p.data_ptr()  # a copy, not shared storage
    # and the torch module loads our state dict back just as well
    ref2 = torch_cls(5, 3, device=device, dtype=F64)
    ref2.load_state_dict(ours.state_dict())
    assert torch.equal(ref2.weight_hh_l0, ref.weight_hh_l0)


@pytest.mark.parametrize("ours_cls, torch_cls", CELLS)
def test_from_torch_rejects_what_it_cannot_copy(ours_cls, torch_cls):
    with pytest.raises(ValueError):
        ours_cls.from_torch(torch_cls(3, 4, num_layers=2))
    with pytest.raises(ValueError):
        ours_cls.from_torch(torch_cls(3, 4, bidirectional=True))
    with pytest.raises(ValueError):
        ours_cls.from_torch(torch_cls(3, 4, bias=False))
    other = nn.GRU if torch_cls is not nn.GRU else nn.LSTM
    with pytest.raises(TypeError):
        ours_cls.from_torch(other(3, 4))


def test_rnn_from_torch_rejects_relu():
    with pytest.raises(ValueError, match="tanh"):
        RNN.from_torch(nn.RNN(3, 4, nonlinearity="relu"))


@pytest.mark.parametrize("ours_cls, torch_cls", CELLS)
def test_bad_shapes_raise_value_error(ours_cls, torch_cls):
    ours = ours_cls(3, 4)
    with pytest.raises(ValueError):
        ours(torch.randn(5, 2, 7))  # wrong input size
    with pytest.raises(ValueError):
        ours(torch.randn(3))  # no time axis
    h = torch.zeros(1, 3, 4)  # batch 3, but the input has batch 2
    with pytest.raises(ValueError):
        ours(torch.randn(5, 2, 3), (h, h) if ours_cls is LSTM else h)


@pytest.mark.parametrize(
    "ours_cls, torch_cls, gates, expected",
    [(RNN, nn.RNN, 1, 1_600), (LSTM, nn.LSTM, 4, 6_400), (GRU, nn.GRU, 3, 4_800)],
    ids=["rnn", "lstm", "gru"],
)
def test_parameter_count(ours_cls, torch_cls, gates, expected):
    I, H = 16, 32
    count = sum(p.numel() for p in ours_cls(I, H).parameters())
    # each gate has an input matrix (H, I), a hidden matrix (H, H) and two biases (H,)
    assert count == gates * (H * I + H * H + 2 * H) == expected
    assert count == sum(p.numel() for p in torch_cls(I, H).parameters())


@pytest.mark.parametrize("ours_cls, torch_cls", CELLS)
def test_initialised_like_torch(ours_cls, torch_cls):
    torch.manual_seed(3)
    ours = ours_cls(7, 11)
    torch.manual_seed(3)
    ref = torch_cls(7, 11)
    # same rule, same parameter order: the same seed gives the very same draws
    for name, p in ref.named_parameters():
        assert torch.equal(getattr(ours, name), p), name
    bound = 1 / math.sqrt(11)
    values = torch.cat([p.flatten() for p in ours.parameters()])
    assert values.abs().max() <= bound
    assert values.min() < -bound / 2 and values.max() > bound / 2  # spread over the range, not ~0


@pytest.mark.parametrize("ours_cls, torch_cls", CELLS)
def test_same_seed_is_bit_identical_on_cpu(ours_cls, torch_cls):
    x = torch.randn(6, 2, 5, generator=torch.Generator().manual_seed(1))

    def run(seed: int) -> torch.Tensor:
        torch.manual_seed(seed)
        return ours_cls(5, 8)(x)[0]

    assert torch.equal(run(0), run(0))
    assert not torch.equal(run(0), run(1))  # the seed really decides the weights


@pytest.mark.parametrize("ours_cls, torch_cls", CELLS)
def test_matches_torch_in_float32(ours_cls, torch_cls, device):
    # the default dtype, on the same device as torch's module (cuDNN on a GPU, in full fp32 there)
    torch.manual_seed(0)
    ref = torch_cls(9, 17, device=device)
    ours = ours_cls.from_torch(ref)
    assert ours.weight_ih_l0.device.type == device.type and ours.weight_ih_l0.dtype == torch.float32
    x = torch.randn(25, 4, 9, device=device)
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        want = flat(ref(x))
    for g, w in zip(flat(ours(x)), want, strict=True):
        assert g.device.type == device.type and g.dtype == torch.float32
        assert_close(g, w, atol=1e-5, rtol=0)


def test_lstm_step_exposes_each_gate(device):
    torch.manual_seed(0)
    I, H, B = 5, 6, 4
    lstm = LSTM(I, H, device=device, dtype=F64)
    x, h, c = (torch.randn(B, n, dtype=F64, device=device) for n in (I, H, H))
    s = lstm.step(x, (h, c))

    def gate(k: int) -> torch.Tensor:  # pre-activation of gate k (order i, f, g, o), from its own rows
        rows = slice(k * H, (k + 1) * H)
        return (x @ lstm.weight_ih_l0[rows].T + lstm.bias_ih_l0[rows]
                + h @ lstm.weight_hh_l0[rows].T + lstm.bias_hh_l0[rows])

    with torch.no_grad():
        assert_close(s.input, torch.sigmoid(gate(0)))
        assert_close(s.forget, torch.sigmoid(gate(1)))
        assert_close(s.candidate, torch.tanh(gate(2)))
        assert_close(s.output, torch.sigmoid(gate(3)))
        assert_close(s.c, s.forget * c + s.input * s.candidate)
        assert_close(s.h, s.output * torch.tanh(s.c))
    for g in (s.input, s.forget, s.output):
        assert g.shape == (B, H) and (g > 0).all() and (g < 1).all()
    assert (s.candidate > -1).all() and (s.candidate < 1).all()
    # step is what forward runs: one step equals a length-1 sequence
    out, (h_n, c_n) = lstm(x[None], (h[None], c[None]))
    assert_close(h_n[0], s.h)
    assert_close(c_n[0], s.c)


@pytest.mark.parametrize("make", [lambda: LSTM(4, 5), lambda: nn.LSTM(4, 5)], ids=["ours", "torch"])
def test_open_forget_gate(make):
    lstm = make()
    H = 5
    before = {n: p.detach().clone() for n, p in lstm.named_parameters()}
    assert open_forget_gate(lstm) is lstm
    forget = slice(H, 2 * H)
    for name in ("bias_ih_l0", "bias_hh_l0"):
        b, old = getattr(lstm, name).detach(), before[name]
        assert torch.equal(b[forget], torch.full((H,), 1.5))
        assert torch.equal(b[:H], old[:H]) and torch.equal(b[2 * H :], old[2 * H :])  # i, g, o untouched
    for name in ("weight_ih_l0", "weight_hh_l0"):
        assert torch.equal(getattr(lstm, name), before[name])
    # the point of it: with no input and no state the forget gate sits at sigmoid(1.5 + 1.5)
    ours = lstm if isinstance(lstm, LSTM) else LSTM.from_torch(lstm)
    zeros = torch.zeros(1, H)
    s = ours.step(torch.zeros(1, 4), (zeros, zeros))
    assert_close(s.forget, torch.full((1, H), 1 / (1 + math.exp(-3.0))))


def test_open_forget_gate_covers_every_layer_and_rejects_other_cells():
    lstm = open_forget_gate(nn.LSTM(3, 4, num_layers=2, bidirectional=True), value=2.0)
    biases = [p for n, p in lstm.named_parameters() if n.startswith("bias_")]
    assert len(biases) == 8
    for b in biases:
        assert torch.equal(b[4:8].detach(), torch.full((4,), 2.0))
    with pytest.raises(TypeError):
        open_forget_gate(nn.GRU(3, 4))  # its second slice is the update gate, not a forget gate
    with pytest.raises(ValueError):
        open_forget_gate(nn.LSTM(3, 4, bias=False))
