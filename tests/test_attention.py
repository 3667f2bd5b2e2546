"""dot_product_attention against torch's scaled_dot_product_attention."""
import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from lessonlib.models.attention import dot_product_attention

F64 = torch.float64
# (query shape, keys shape, values shape): unbatched, batched, batch x heads, broadcast keys
SHAPES = [
    ((5, 4), (7, 4), (7, 3)),
    ((2, 6, 8), (2, 6, 8), (2, 6, 5)),
    ((2, 3, 6, 8), (2, 3, 9, 8), (2, 3, 9, 8)),
    ((2, 3, 4, 4), (1, 3, 4, 4), (1, 3, 4, 6)),
]


def randn(shape, device) -> torch.Tensor:
    return torch.randn(shape, dtype=F64, device=device, requires_grad=True)


def sdpa_cases():
    """Every shape with and without scale; causal too where Lq == Lk (see test_causal_needs_square_scores)."""
    for shapes in SHAPES:
        name = "x".join(map(str, shapes[0])) + f"-Lk{shapes[1][-2]}"
        square = shapes[0][-2] == shapes[1][-2]
        for scale in (True, False):
            for causal in (False, True) if square else (False,):
                flags = ("scaled" if scale else "unscaled") + ("-causal" if causal else "")
                yield pytest.param(*shapes, scale, causal, id=f"{name}-{flags}")


@pytest.mark.parametrize("q_shape, k_shape, v_shape, scale, causal", list(sdpa_cases()))
def test_matches_sdpa(q_shape, k_shape, v_shape, scale, causal, device):
    torch.manual_seed(0)
    q, k, v = randn(q_shape, device), randn(k_shape, device), randn(v_shape, device)
    sdpa_scale = None if scale else 1.0  # None: SDPA's default 1/sqrt(D)

    context, weights = dot_product_attention(q, k, v, scale=scale, causal=causal)
    want = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=sdpa_scale)
    assert context.shape == want.shape
    assert_close(context, want, atol=1e-9, rtol=0)

    # with the identity as values, SDPA hands back its attention weights
    eye = torch.eye(k.shape[-2], dtype=F64, device=device)
    want_weights = F.scaled_dot_product_attention(q.detach(), k.detach(), eye,
                                                  is_causal=causal, scale=sdpa_scale)
    assert_close(weights.detach(), want_weights, atol=1e-9, rtol=0)
    ones = torch.ones(weights.shape[:-1], dtype=F64, device=device)
    assert_close(weights.sum(-1), ones, atol=1e-12, rtol=0)  # each query's weights sum to 1

    proj = torch.randn_like(want)
    grads = torch.autograd.grad((context * proj).sum(), (q, k, v))
    want_grads = torch.autograd.grad((want * proj).sum(), (q, k, v))
    for g, w in zip(grads, want_grads, strict=True):
        assert_close(g, w, atol=1e-9, rtol=0)


def test_causal_weights_are_zero_above_the_diagonal(device):
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 6, 4, device=device) for _ in range(3))
    _, weights = dot_product_attention(q, k, v, causal=True)
    future = torch.ones(6, 6, dtype=torch.bool, device=device).triu(1)
    assert (weights[:, future] == 0).all()
    assert (weights[:, ~future] > 0).all()  # everything else keeps some weight
    assert_close(weights[:, 0, 0], torch.ones(2, device=device))  # the first query sees only itself


def test_scale_divides_scores_by_sqrt_d():
    torch.manual_seed(0)
    q, k, v = torch.randn(3, 16, dtype=F64), torch.randn(5, 16, dtype=F64), torch.randn(5, 2, dtype=F64)
    _, scaled = dot_product_attention(q, k, v)
    _, unscaled = dot_product_attention(q / 4, k, v, scale=False)  # sqrt(16) = 4
    assert_close(scaled, unscaled, atol=1e-12, rtol=0)
    _, raw = dot_product_attention(q, k, v, scale=False)
    assert not torch.allclose(scaled, raw)


@pytest.mark.parametrize(
    "q_shape, k_shape, v_shape",
    [
        ((5, 4), (7, 3), (7, 3)),  # query and keys disagree on D
        ((5, 4), (7, 4), (6, 3)),  # keys and values disagree on Lk
        ((4,), (7, 4), (7, 3)),  # no sequence axis
        ((2, 5, 4), (3, 7, 4), (3, 7, 3)),  # batch 2 vs 3 does not broadcast
    ],
)
def test_bad_shapes_raise_value_error(q_shape, k_shape, v_shape):
    with pytest.raises(ValueError):
        dot_product_attention(torch.randn(q_shape), torch.randn(k_shape), torch.randn(v_shape))


def test_causal_needs_square_scores():
    # SDPA's is_causal aligns the mask top-left when Lq != Lk; we refuse rather than guess
    with pytest.raises(ValueError, match="Lq == Lk"):
        dot_product_attention(torch.randn(3, 4), torch.randn(5, 4), torch.randn(5, 2), causal=True)


def test_boolean_mask_matches_sdpa_and_gives_masked_keys_zero_weight(device):
    torch.manual_seed(0)
    q, k, v = randn((2, 3, 5, 8), device), randn((2, 3, 7, 8), device), randn((2, 3, 7, 4), device)
    lengths = torch.tensor([7, 4], device=device)  # the second sequence has 3 padded keys
    mask = (torch.arange(7, device=device) < lengths[:, None])[:, None, None, :]  # (B, 1, 1, Lk)

    context, weights = dot_product_attention(q, k, v, mask=mask)
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert_close(context, want, atol=1e-9, rtol=0)
    assert torch.all(weights[1, ..., 4:] == 0)  # exactly zero, not merely small
    assert torch.all(weights[0] > 0)
    grads = torch.autograd.grad(context.sum(), (q, k, v))
    want_grads = torch.autograd.grad(want.sum(), (q, k, v))
    for g, w in zip(grads, want_grads, strict=True):
        assert_close(g, w, atol=1e-9, rtol=0)


def test_mask_must_be_boolean():
    q = torch.randn(2, 3, 4)
    with pytest.raises(ValueError, match="boolean"):
        dot_product_attention(q, q, q, mask=torch.ones(3, 3))
