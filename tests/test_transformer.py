"""The transformer's parts against torch: nn.MultiheadAttention and nn.TransformerEncoderLayer
(norm_first=True) with copied weights, in float64, outputs and the gradient of every parameter,
with and without masks; positions, generation with the KV cache, and parameter counts."""
import math

import pytest
import torch
from torch import nn
from torch.testing import assert_close

from lessonlib.models.multihead import KVCache, MultiHeadAttention, causal_mask, merge_heads, split_heads
from lessonlib.models.positional import LearnedPositions, SinusoidalPositions, positions, sinusoidal
from lessonlib.models.transformer import Block, TokenModel, Transformer

F64 = torch.float64
B, L, D, HEADS = 3, 7, 12, 3
MASKS = ["none", "causal", "padding", "causal+padding"]


def inputs(device, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, L, D, generator=g, dtype=F64).to(device).requires_grad_()
    padding = torch.zeros(B, L, dtype=torch.bool)
    padding[1, 4:] = True  # the second sequence has 3 padded positions at its end
    padding[2, 6:] = True
    return x, padding.to(device)


def torch_masks(mask: str, padding):
    """torch's arguments for our mask: attn_mask True = may NOT attend, key_padding_mask True = pad."""
    attn_mask = ~causal_mask(L, device=padding.device) if "causal" in mask else None
    return attn_mask, (padding if "padding" in mask else None)


def ours_kwargs(mask: str, padding):
    return {"causal": "causal" in mask, "key_padding_mask": padding if "padding" in mask else None}


def compare_grads(ours: nn.Module, ref: nn.Module, out, want, x, atol=1e-10):
    """Backpropagate the same random projection through both; every parameter's gradient and x's must agree."""
    proj = torch.randn_like(want)
    grads = torch.autograd.grad((out * proj).sum(), [x, *ours.parameters()])
    want_grads = torch.autograd.grad((want * proj).sum(), [x, *ref.parameters()])
    names = ["x", *(n for n, _ in ours.named_parameters())]
    assert names[1:] == [n for n, _ in ref.named_parameters()], "the same parameters, in the same order"
    for name, g, w in zip(names, grads, want_grads, strict=True):
        assert_close(g, w, atol=atol, rtol=0, msg=f"gradient of {name}")


# ----------------------------------------------------------------------------- multi-head attention

@pytest.mark.parametrize("mask", MASKS)
@pytest.mark.parametrize("need_weights", [True, False], ids=["written-out", "fused"])
def test_multihead_matches_torch(mask, need_weights, device):
    torch.manual_seed(0)
    ref = nn.MultiheadAttention(D, HEADS, batch_first=True, dtype=F64, device=device)
    ours = MultiHeadAttention(D, HEADS, dtype=F64, device=device)
    ours.load_state_dict(ref.state_dict())  # the same names and shapes: nothing to convert
    x, padding = inputs(device)
    attn_mask, key_padding = torch_masks(mask, padding)

    out, weights = ours(x, **ours_kwargs(mask, padding), need_weights=need_weights)
    want, want_weights = ref(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding,
                             need_weights=True, average_attn_weights=False)
    assert_close(out, want, atol=1e-12, rtol=0)
    if need_weights:
        assert_close(weights, want_weights, atol=1e-12, rtol=0)  # (B, heads, L, L): every head's own
    else:
        assert weights is None
    compare_grads(ours, ref, out, want, x)


def test_masked_keys_get_exactly_zero_weight(device):
    torch.manual_seed(0)
    x, padding = inputs(device)
    _, weights = MultiHeadAttention(D, HEADS, dtype=F64, device=device)(x, causal=True, key_padding_mask=padding)
    future = ~causal_mask(L, device=device)
    assert (weights[..., future] == 0).all()
    assert (weights[1, ..., 4:] == 0).all() and (weights[2, ..., 6:] == 0).all()
    assert (weights[0][..., ~future] > 0).all()  # everything else keeps some weight


def test_split_and_merge_heads():
    x = torch.arange(2 * 5 * 12.0).view(2, 5, 12)
    heads = split_heads(x, 3)
    assert heads.shape == (2, 3, 5, 4)
    assert torch.equal(heads[1, 2, 4], x[1, 4, 8:12])  # head h holds features h*4 .. h*4 + 3
    assert torch.equal(merge_heads(heads), x)
    with pytest.raises(ValueError, match="split"):
        split_heads(x, 5)


def test_causal_mask_with_a_cache_is_aligned_bottom_right():
    assert torch.equal(causal_mask(3), torch.tensor([[1, 0, 0], [1, 1, 0], [1, 1, 1]], dtype=torch.bool))
    # two new queries after 3 cached positions: positions 3 and 4 of 5
    assert torch.equal(causal_mask(2, 5), torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]], dtype=torch.bool))


def test_heads_add_no_parameters():
    counts = {h: sum(p.numel() for p in MultiHeadAttention(32, h).parameters()) for h in (1, 2, 4, 8)}
    assert set(counts.values()) == {4 * 32 * 32 + 4 * 32}


def test_self_attention_without_positions_is_permutation_equivariant():
    torch.manual_seed(0)
    attn = MultiHeadAttention(D, HEADS, dtype=F64)
    x, _ = inputs("cpu")
    perm = torch.randperm(L)
    out, _ = attn(x)
    out_shuffled, _ = attn(x[:, perm])
    assert_close(out_shuffled, out[:, perm], atol=1e-12, rtol=0)
    model = Transformer(D, HEADS, positions=None, causal=False).double()
    assert_close(model(x[:, perm])[0], model(x)[0][:, perm], atol=1e-12, rtol=0)


@pytest.mark.parametrize("kind", ["sinusoidal", "learned"])
def test_positions_break_the_symmetry(kind):
    torch.manual_seed(0)
    model = Transformer(D, HEADS, positions=kind, causal=False).double()
    x, _ = inputs("cpu")
    perm = torch.arange(L).roll(1)
    assert not torch.allclose(model(x[:, perm])[0], model(x)[0][:, perm], atol=1e-3)


def test_causal_output_never_depends_on_later_inputs():
    torch.manual_seed(0)
    model = Transformer(D, HEADS, layers=2, causal=True).double()
    x, _ = inputs("cpu")
    changed = x.detach().clone()
    changed[:, 4:] = torch.randn(B, L - 4, D, dtype=F64)
    before, after = model(x)[0], model(changed)[0]
    assert_close(after[:, :4], before[:, :4], atol=1e-12, rtol=0)
    assert not torch.allclose(after[:, 4:], before[:, 4:])
    unmasked = Transformer(D, HEADS, layers=2, causal=False).double()
    assert not torch.allclose(unmasked(changed)[0][:, :4], unmasked(x)[0][:, :4])


@pytest.mark.parametrize("mask", MASKS)
@pytest.mark.parametrize("need_weights", [True, False], ids=["written-out", "fused"])
@pytest.mark.parametrize("last", [1, 3])
def test_the_last_positions_alone_equal_the_full_run(mask, need_weights, last, device):
    """last=k computes only the last k queries of the final block; outputs and gradients equal the full run's."""
    torch.manual_seed(0)
    model = Transformer(D, HEADS, layers=2, causal="causal" in mask).double().to(device)
    x, padding = inputs(device)
    kwargs = {"key_padding_mask": padding if "padding" in mask else None, "need_weights": need_weights}
    full, full_weights = model(x, **kwargs)
    out, weights = model(x, last=last, **kwargs)
    assert out.shape == (B, last, D)
    assert_close(out, full[:, -last:], atol=1e-12, rtol=0)
    if need_weights:
        assert_close(weights[-1], full_weights[-1][:, :, -last:], atol=1e-12, rtol=0)
        assert_close(weights[0], full_weights[0], atol=0, rtol=0)  # earlier blocks: every position
    proj = torch.randn_like(out)
    grads = torch.autograd.grad((out * proj).sum(), [x, *model.parameters()])
    want = torch.autograd.grad((full[:, -last:] * proj).sum(), [x, *model.parameters()])
    for g, w in zip(grads, want, strict=True):
        assert_close(g, w, atol=1e-10, rtol=0)


# ----------------------------------------------------------------------------- the block

@pytest.mark.parametrize("mask", MASKS)
def test_block_matches_torch_encoder_layer(mask, device):
    torch.manual_seed(0)
    ref = nn.TransformerEncoderLayer(D, HEADS, dim_feedforward=20, dropout=0.0, activation="gelu",
                                     batch_first=True, norm_first=True, dtype=F64, device=device)
    ours = Block(D, HEADS, d_ff=20).to(device, F64)
    ours.load_state_dict(ref.state_dict())
    x, padding = inputs(device)
    attn_mask, key_padding = torch_masks(mask, padding)

    out, _ = ours(x, **ours_kwargs(mask, padding))
    want = ref(x, src_mask=attn_mask, src_key_padding_mask=key_padding)
    assert_close(out, want, atol=1e-12, rtol=0)
    compare_grads(ours, ref, out, want, x)


def test_block_parameter_count_by_part():
    d, d_ff = 32, 128
    block = Block(d, 2, d_ff)
    part = {name: sum(p.numel() for p in module.parameters()) for name, module in block.named_children()}
    assert part == {"self_attn": 4 * d * d + 4 * d, "linear1": d * d_ff + d_ff, "linear2": d_ff * d + d,
                    "norm1": 2 * d, "norm2": 2 * d}
    ref = nn.TransformerEncoderLayer(d, 2, d_ff, norm_first=True, batch_first=True)
    assert sum(part.values()) == sum(p.numel() for p in ref.parameters())


def test_same_seed_same_weights_as_torch():
    torch.manual_seed(0)
    ref = nn.TransformerEncoderLayer(D, HEADS, 20, batch_first=True, norm_first=True)
    torch.manual_seed(0)
    ours = Block(D, HEADS, 20)
    for (name, p), (ref_name, q) in zip(ours.named_parameters(), ref.named_parameters(), strict=True):
        assert name == ref_name and torch.equal(p, q), name


# ----------------------------------------------------------------------------- positions

def test_sinusoidal_values_and_offsets():
    pe = sinusoidal(50, 16, dtype=F64)
    assert pe.shape == (50, 16)
    p, i = 7, 3  # PE[p, 2i] = sin(p / 10000^(2i/d)), PE[p, 2i+1] = cos(...)
    assert math.isclose(pe[p, 2 * i], math.sin(p / 10_000 ** (2 * i / 16)), abs_tol=1e-12)
    assert math.isclose(pe[p, 2 * i + 1], math.cos(p / 10_000 ** (2 * i / 16)), abs_tol=1e-12)
    assert_close(pe.norm(dim=1), torch.full((50,), math.sqrt(8), dtype=F64))  # d/2 (sin, cos) pairs
    dots = pe @ pe.T  # PE[p] . PE[q] depends on q - p only
    for k in (1, 5, 20):
        assert_close(dots.diagonal(k), dots.diagonal(k)[:1].expand(50 - k))
    assert torch.equal(sinusoidal(5, 16, start=20, dtype=F64), sinusoidal(25, 16, dtype=F64)[20:])


def test_position_modules():
    x = torch.zeros(2, 6, 8)
    assert torch.equal(SinusoidalPositions(8)(x, start=3)[0], sinusoidal(6, 8, start=3))
    learned = LearnedPositions(10, 8)
    assert_close(learned(x)[1], learned.weight[:6])
    assert_close(learned(x, start=4)[1], learned.weight[4:10])
    with pytest.raises(ValueError, match="learned"):
        learned(x, start=5)
    assert positions(None, 8, 10) is None
    with pytest.raises(ValueError):
        positions("rotary", 8, 10)
    with pytest.raises(ValueError, match="even"):
        sinusoidal(4, 7)


# ----------------------------------------------------------------------------- the token model

@pytest.mark.parametrize("kind", ["sinusoidal", "learned"])
def test_generation_with_the_cache_equals_rerunning_the_prefix(kind, device):
    torch.manual_seed(0)
    model = TokenModel(11, 16, 2, layers=2, positions=kind, max_len=40).to(device).eval()
    prompt = torch.randint(0, 11, (4, 5), device=device)
    with_cache = model.generate(prompt, 12)
    without = model.generate(prompt, 12, use_cache=False)
    assert with_cache.shape == (4, 17) and torch.equal(with_cache[:, :5], prompt)
    assert torch.equal(with_cache, without)
    # the logits too, not only their argmax: the cached run of the last token equals the full run
    caches = [KVCache() for _ in model.transformer.blocks]
    with torch.no_grad():
        model(with_cache[:, :-1], caches=caches)
        step, _ = model(with_cache[:, -1:], caches=caches)
        full, _ = model(with_cache)
    assert_close(step[:, 0], full[:, -1], atol=1e-5, rtol=1e-5)
    assert len(caches[0]) == 17


def test_cache_needs_a_causal_model():
    model = TokenModel(5, 8, 2, causal=False)
    with pytest.raises(ValueError, match="causal"):
        model.generate(torch.zeros(1, 2, dtype=torch.long), 3)
    assert model.generate(torch.zeros(1, 2, dtype=torch.long), 3, use_cache=False).shape == (1, 5)


def test_token_model_shapes_and_weights():
    model = TokenModel(11, 16, 4, layers=3, outputs=2, max_len=20)
    tokens = torch.randint(0, 11, (5, 9))
    logits, weights = model(tokens, need_weights=True)
    assert logits.shape == (5, 9, 2)
    assert [w.shape for w in weights] == [(5, 4, 9, 9)] * 3
    assert model(tokens)[1] == []  # weights only when asked for
    assert_close(model.classify(tokens), logits[:, -1])  # the fused and the written-out path agree


def test_input_projection_only_when_widths_differ():
    assert Transformer(16, 2, d_in=16).project is None
    model = Transformer(16, 2, d_in=6)
    assert model.project.weight.shape == (16, 6)
    assert model(torch.randn(2, 5, 6))[0].shape == (2, 5, 16)
