"""The delta rule (lessonlib.models.delta_rule) and the DeltaNet layer (lessonlib.models.deltanet): the
chunkwise form against the token-by-token loop (outputs, final states and gradients), one write checked
by hand (the edit property), the gate's reset, and why the keys are unit vectors."""
import pytest
import torch
from torch.nn import functional as F
from torch.testing import assert_close

from lessonlib.models.delta_rule import delta_rule_chunkwise, delta_rule_loop, delta_rule_step
from lessonlib.models.deltanet import DeltaNet

F64, F32 = torch.float64, torch.float32
CHUNKS = [1, 4, 8, 16, 64]  # T = 37 is a multiple of none but 1; 64 is one chunk longer than T


def inputs(device, dtype=F64, B=2, H=3, T=37, d_k=5, d_v=4, gated=False, seed=0):
    """q, k (unit), v, beta in (0, 1), alpha in (0, 1) or None, and a random starting state."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, T, d_k, generator=g, dtype=F64)
    k = F.normalize(torch.randn(B, H, T, d_k, generator=g, dtype=F64), dim=-1)
    v = torch.randn(B, H, T, d_v, generator=g, dtype=F64)
    beta = torch.rand(B, H, T, generator=g, dtype=F64)
    alpha = torch.rand(B, H, T, generator=g, dtype=F64) if gated else None
    state = torch.randn(B, H, d_k, d_v, generator=g, dtype=F64)
    return [None if x is None else x.to(device, dtype) for x in (q, k, v, beta, alpha, state)]


@pytest.mark.parametrize("gated", [False, True], ids=["delta", "gated"])
@pytest.mark.parametrize("chunk_size", CHUNKS)
def test_chunkwise_equals_the_loop(chunk_size, gated, device):
    q, k, v, beta, alpha, state = inputs(device, gated=gated)
    for S0 in (None, state):
        want, want_S = delta_rule_loop(q, k, v, beta, alpha, S0)
        got, got_S = delta_rule_chunkwise(q, k, v, beta, alpha, chunk_size=chunk_size, state=S0)
        assert got.shape == (2, 3, 37, 4) and got_S.shape == (2, 3, 5, 4)
        assert_close(got, want, rtol=1e-10, atol=1e-10)
        assert_close(got_S, want_S, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("gated", [False, True], ids=["delta", "gated"])
def test_chunkwise_equals_the_loop_in_float32(gated, device):
    q, k, v, beta, alpha, state = inputs(device, F32, B=4, H=2, T=96, d_k=32, d_v=32, gated=gated)
    want, want_S = delta_rule_loop(q, k, v, beta, alpha, state)
    for chunk_size in (16, 20):
        got, got_S = delta_rule_chunkwise(q, k, v, beta, alpha, chunk_size=chunk_size, state=state)
        assert_close(got, want, rtol=1e-5, atol=1e-5)
        assert_close(got_S, want_S, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("gated", [False, True], ids=["delta", "gated"])
@pytest.mark.parametrize("chunk_size", [4, 16])
def test_gradients_of_the_chunkwise_form_equal_the_loops(chunk_size, gated, device):
    """Through q, k, v, beta, alpha and the starting state, from both the outputs and the final state."""
    leaves = [x.requires_grad_() for x in inputs(device, T=23, gated=gated) if x is not None]
    g = torch.Generator().manual_seed(1)
    w_o, w_S = torch.randn(2, 3, 23, 4, generator=g, dtype=F64), torch.randn(2, 3, 5, 4, generator=g, dtype=F64)

    def grads(form, **kw):
        q, k, v, beta, *rest = leaves
        alpha, state = rest if gated else (None, rest[0])
        o, S = form(q, k, v, beta, alpha, state=state, **kw)
        return torch.autograd.grad((o * w_o.to(device)).sum() + (S * w_S.to(device)).sum(), leaves)

    for name, got, want in zip("q k v beta alpha state".split() if gated else "q k v beta state".split(),
                               grads(delta_rule_chunkwise, chunk_size=chunk_size), grads(delta_rule_loop)):
        assert want.abs().sum() > 0, name
        assert_close(got, want, rtol=1e-9, atol=1e-10, msg=name)


# one write, by hand; d_k = d_v so that S k and S^T k have the same shape and only the values differ


def one_write(device, d=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    S = torch.randn(d, d, generator=g, dtype=F64)
    k = F.normalize(torch.randn(d, generator=g, dtype=F64), dim=0)
    v = torch.randn(d, generator=g, dtype=F64)
    return S.to(device), k.to(device), v.to(device)


@pytest.mark.parametrize("beta", [1.0, 0.3])
def test_writing_what_the_state_already_returns_changes_nothing(beta, device):
    S, k, _ = one_write(device)
    v = S.T @ k  # the state already maps k to this value: nothing to correct
    assert_close(delta_rule_step(S, k, v, torch.tensor(beta, dtype=F64, device=device)), S, rtol=0, atol=1e-14)


def test_a_write_with_beta_one_edits_the_value_under_its_key(device):
    """The edit property: after writing (k, v) with beta = 1, reading with k returns v itself; adding
    (linear attention's S + k v^T) returns the old value plus v. Directions orthogonal to k keep theirs."""
    S, k, v = one_write(device)
    old = S.T @ k
    new = delta_rule_step(S, k, v, torch.tensor(1.0, dtype=F64, device=device))
    assert_close(new.T @ k, v, rtol=0, atol=1e-14)
    assert_close((S + torch.outer(k, v)).T @ k, old + v, rtol=0, atol=1e-14)
    assert (old.abs() > 1e-3).all()  # so the two reads differ in every entry
    u = torch.randn(4, dtype=F64, device=device)
    u = u - (u @ k) * k  # orthogonal to k
    assert_close(new.T @ u, S.T @ u, rtol=0, atol=1e-14)
    one = torch.ones(1, 1, 1, dtype=F64, device=device)  # the same write through both forms, read with q = k
    for form in (delta_rule_loop, delta_rule_chunkwise):
        o, S_1 = form(k.view(1, 1, 1, 4), k.view(1, 1, 1, 4), v.view(1, 1, 1, 4), one, state=S.view(1, 1, 4, 4))
        assert_close(o.view(4), v, rtol=0, atol=1e-14)
        assert_close(S_1.view(4, 4), new, rtol=0, atol=1e-14)
    beta = torch.tensor(0.25, dtype=F64, device=device)  # and the second form of the same rule
    I = torch.eye(4, dtype=F64, device=device)
    want = (I - beta * torch.outer(k, k)) @ S + beta * torch.outer(k, v)
    assert_close(delta_rule_step(S, k, v, beta), want, rtol=0, atol=1e-14)
    assert_close(want.T @ k, old + beta * (v - old), rtol=0, atol=1e-14)  # a quarter of the way to v


def test_unit_keys_never_enlarge_the_state_and_long_ones_do(device):
    """Why the layer normalises keys: erasing (v = 0) with a unit key and beta in (0, 1] never grows S."""
    g = torch.Generator().manual_seed(0)
    S = torch.randn(4, 4, generator=g, dtype=F64).to(device)
    zero = torch.zeros(4, dtype=F64, device=device)
    for _ in range(50):
        k = F.normalize(torch.randn(4, generator=g, dtype=F64), dim=0).to(device)
        beta = torch.rand((), generator=g, dtype=F64).to(device)
        new = delta_rule_step(S, k, zero, beta)
        assert torch.linalg.matrix_norm(new) <= torch.linalg.matrix_norm(S) * (1 + 1e-12)
        S = new
    long = 3 ** 0.5 * k  # ||k||^2 = 3: S's component along k is multiplied by 1 - 3 = -2
    grown = delta_rule_step(S, long, zero, torch.tensor(1.0, dtype=F64, device=device))
    assert_close(grown.T @ k, -2 * (S.T @ k), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("form", ["loop", "chunkwise"])
def test_a_gate_of_zero_forgets_everything_before_it(form, device):
    """alpha_t = 0 at t = 13 (inside a chunk of 8): from there on, the outputs and the final state are
    those of a fresh start at t = 13; alpha = 1 everywhere is the plain delta rule."""
    q, k, v, beta, alpha, state = inputs(device, gated=True)
    run = delta_rule_loop if form == "loop" else lambda *a: delta_rule_chunkwise(*a[:5], chunk_size=8, state=a[5])
    reset = alpha.clone()
    reset[..., 13] = 0
    o, S = run(q, k, v, beta, reset, state)
    fresh, fresh_S = delta_rule_loop(*(x[:, :, 13:] for x in (q, k, v, beta, alpha)))
    assert torch.isfinite(o).all()
    assert_close(o[:, :, 13:], fresh, rtol=1e-10, atol=1e-12)
    assert_close(S, fresh_S, rtol=1e-10, atol=1e-12)
    plain = delta_rule_loop(q, k, v, beta, None, state)
    for got, want in zip(run(q, k, v, beta, torch.ones_like(alpha), state), plain):
        assert_close(got, want, rtol=1e-10, atol=1e-12)


# the layer


@pytest.mark.parametrize("gated", [False, True], ids=["delta", "gated"])
def test_deltanet_chunkwise_and_loop_agree_with_the_same_gradients(gated, device):
    torch.manual_seed(0)
    model = DeltaNet(8, n_heads=2, gated=gated, chunk_size=8).to(device, F64)
    x = torch.randn(3, 21, 8, dtype=F64, device=device)
    y, S = model(x)
    assert y.shape == (3, 21, 8) and S.shape == (3, 2, 4, 4)
    y_loop, S_loop = model(x, loop=True)
    assert_close(y, y_loop, rtol=1e-10, atol=1e-12)
    assert_close(S, S_loop, rtol=1e-10, atol=1e-12)
    w = torch.randn(3, 21, 8, dtype=F64, device=device)
    params = list(model.parameters())
    chunk_grads = torch.autograd.grad((y * w).sum(), params)
    loop_grads = torch.autograd.grad((y_loop * w).sum(), params)
    for (name, _), got, want in zip(model.named_parameters(), chunk_grads, loop_grads):
        assert want.abs().sum() > 0, name
        assert_close(got, want, rtol=1e-9, atol=1e-12, msg=name)


def test_deltanet_keys_are_unit_vectors_and_its_gates_are_fractions(device):
    torch.manual_seed(0)
    model = DeltaNet(8, n_heads=2, gated=True).to(device, F64)
    q, k, v, beta, alpha = model.inputs(torch.randn(3, 10, 8, dtype=F64, device=device) * 10)
    assert k.shape == (3, 2, 10, 4) and beta.shape == alpha.shape == (3, 2, 10)
    assert_close(k.norm(dim=-1), torch.ones(3, 2, 10, dtype=F64, device=device))
    assert_close(q.norm(dim=-1), torch.ones(3, 2, 10, dtype=F64, device=device))
    assert ((beta > 0) & (beta < 1) & (alpha > 0) & (alpha < 1)).all()


def test_deltanet_is_causal(device):
    """Changing token 12 changes no output before it (the convolution looks back only), and changes 12's."""
    torch.manual_seed(0)
    model = DeltaNet(8, n_heads=2, gated=True, chunk_size=8).to(device, F64)
    x = torch.randn(2, 20, 8, dtype=F64, device=device)
    changed = x.clone()
    changed[:, 12] += 1
    y, y_changed = model(x)[0], model(changed)[0]
    assert_close(y_changed[:, :12], y[:, :12], rtol=0, atol=0)
    assert (y_changed[:, 12] - y[:, 12]).abs().min() > 0
