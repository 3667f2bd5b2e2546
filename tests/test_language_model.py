"""Lesson 4's reference code: the text and its tokenizer, the character models, truncated
backpropagation through time, sampling, and generation with a cache.

Against torch where torch has a counterpart (its recurrent layers, cross-entropy, multinomial
sampling); otherwise properties: the tokenizer round-trips, reading in chunks equals reading at
once, a truncation at least as long as the sequence is full backpropagation through time,
temperature towards 0 is greedy decoding, and the cache writes what rereading the text writes.
"""
from __future__ import annotations

import dataclasses
import hashlib
import math
import re
from importlib import resources

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from lessonlib.data import text
from lessonlib.experiments import language_model as lm
from lessonlib.models.char_rnn import CharRNN, detach_state
from lessonlib.models.char_transformer import CharTransformer
from lessonlib.models.lstm import LSTM
from lessonlib.models.recurrent_mixer import RecurrentMixer
from lessonlib.models.rnn import RNN
from lessonlib.models.sampling import generate, next_token

V = 12


def small(kind: str, seed: int = 0, dtype=torch.float64) -> nn.Module:
    torch.manual_seed(seed)
    model = CharTransformer(V, 16, 2, 2, context=40) if kind == "gpt" else CharRNN(kind, V, 8, 16)
    return model.to(dtype).eval()


def tokens(B: int, T: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(seed))


# ----------------------------------------------------------------------------- the text

def test_the_plays_ship_with_the_package_as_the_readme_lists_them():
    folder = resources.files("lessonlib.data").joinpath("shakespeare")
    readme = folder.joinpath("README.md").read_text()
    listed = dict((name, digest) for digest, name in re.findall(r"^([0-9a-f]{64})  (\w+\.txt)$", readme, re.M))
    assert set(listed) == {f"{p}.txt" for p in (*text.TRAIN_PLAYS, *text.VAL_PLAYS)}
    total = 0
    for name, digest in listed.items():
        data = folder.joinpath(name).read_bytes()
        assert hashlib.sha256(data).hexdigest() == digest, f"{name} is not the file the README names"
        total += len(data)
    assert total <= 1_000_000, "at most about a megabyte of text"
    assert "Creative Commons Attribution" in folder.joinpath("COPYING.txt").read_text()


def test_the_validation_play_is_not_in_the_training_text():
    parts = text.corpus()
    assert text.play("macbeth") == parts["val"] and "MACBETH" not in parts["train"]
    assert len(parts["train"]) > 5 * len(parts["val"])


def test_tokenizer_round_trips_every_character_of_the_plays():
    parts = text.corpus()
    tok = text.CharTokenizer(parts["train"] + parts["val"])
    for part in parts.values():
        ids = tok.encode(part)
        assert ids.dtype == torch.long and len(ids) == len(part)
        assert tok.decode(ids) == part
    assert tok.chars == sorted(tok.chars) and len(set(tok.chars)) == len(tok)
    assert tok.decode(tok.encode("To be, or not to be")) == "To be, or not to be"


def test_tokenizer_names_a_character_it_never_saw():
    with pytest.raises(ValueError, match="'z' is not in"):
        text.CharTokenizer("abc").encode("abz")


def test_chunks_continue_each_other_and_targets_are_the_next_characters():
    ids = torch.arange(103)
    rows = text.streams(ids, 4)  # (4, 25)
    assert torch.equal(rows[1], torch.arange(25, 50)), "row b is the b-th contiguous stretch"
    pieces = list(text.chunks(rows, 6))
    assert len(pieces) == 4
    for (x, y), (x_next, _) in zip(pieces, pieces[1:]):
        assert torch.equal(y, x + 1) and torch.equal(x_next[:, 0], x[:, -1] + 1), "chunk i + 1 goes on from chunk i"
    x, y = text.windows(ids, 10)
    assert x.shape == y.shape == (10, 10) and torch.equal(y, x + 1) and torch.equal(x[1], torch.arange(10, 20))
    x, y = text.windows(ids, 10, stride=3)
    assert x.shape == (31, 10) and torch.equal(x[2], torch.arange(6, 16)) and torch.equal(y, x + 1)
    x, y = text.random_windows(ids, 10, 500)
    assert x.shape == (500, 10) and torch.equal(y, x + 1) and torch.equal(x[:, 1:], x[:, :-1] + 1)
    assert x[:, 0].min() == 0 and x[:, 0].max() == 102 - 10, "starts anywhere a window fits"
    assert torch.equal(text.random_windows(ids, 10, 500)[0], x), "seeded: the same windows every time"


# ----------------------------------------------------------------------------- the models

@pytest.mark.parametrize("kind, written_out", [("rnn", RNN), ("lstm", LSTM)])
def test_char_rnn_is_embedding_torch_layer_and_head(kind, written_out):
    """Against torch's layer written out step by step (lessonlib's RNN, LSTM), with its weights."""
    model = small(kind)
    x = tokens(3, 9)
    logits, _ = model(x)
    out, _ = written_out.from_torch(model.rnn)(model.embed(x))
    assert torch.allclose(logits, model.head(out), atol=1e-12)
    assert [n for n, _ in model.named_parameters()] == [
        "embed.weight", "rnn.weight_ih_l0", "rnn.weight_hh_l0", "rnn.bias_ih_l0", "rnn.bias_hh_l0",
        "head.weight", "head.bias"]


@pytest.mark.parametrize("kind", ["rnn", "gru", "lstm", "gpt"])
def test_reading_in_pieces_equals_reading_at_once(kind):
    model = small(kind)
    x = tokens(2, 30)
    whole, _ = model(x)
    first, state = model.stream(x[:, :11])
    second, state = model.stream(x[:, 11:12], state)
    third, _ = model.stream(x[:, 12:], state)
    assert torch.allclose(torch.cat([first, second, third], 1), whole, atol=1e-10)


def test_transformer_is_causal_and_limited_to_its_context():
    model = small("gpt")
    x = tokens(1, 40)
    changed = x.clone()
    changed[0, 25:] = (changed[0, 25:] + 1) % V
    assert torch.equal(model(x)[0][:, :25], model(changed)[0][:, :25])
    assert not torch.allclose(model(x)[0][:, 25], model(changed)[0][:, 25])
    _, caches = model.stream(x[:, :39])
    with pytest.raises(ValueError, match="at most 40"):
        model.stream(x[:, :2], caches)


def test_the_protocol_models_have_about_the_same_size():
    counts = {name: lm.parameters(lm.build(name, 73)) for name in lm.MODELS + lm.MIXERS}
    assert max(counts.values()) < 1.25 * min(counts.values()), counts


@pytest.mark.parametrize("kind", lm.MIXERS)
def test_a_mixer_model_is_the_gpt_with_a_recurrent_layer_in_attentions_place(kind):
    gpt, mixed = lm.build("gpt", V), lm.build(kind, V)
    assert [type(b.self_attn) for b in mixed.transformer.blocks] == [RecurrentMixer] * len(gpt.transformer.blocks)
    assert all(b.self_attn.kind == kind for b in mixed.transformer.blocks)
    attention = {n for n, _ in gpt.named_parameters() if ".self_attn." in n}
    same = {n: p.shape for n, p in gpt.named_parameters() if n not in attention}
    assert same == {n: p.shape for n, p in mixed.named_parameters() if ".self_attn." not in n}


@pytest.mark.parametrize("kind", lm.MIXERS)
def test_a_mixer_model_is_causal_and_refuses_what_a_recurrence_cannot_do(kind):
    torch.manual_seed(0)
    model = lm.build(kind, V, dataclasses.replace(lm.PROTOCOL, chunk=40)).double().eval()
    x = tokens(2, 40)
    changed = x.clone()
    changed[:, 25:] = (changed[:, 25:] + 1) % V
    with torch.no_grad():
        before, after = model(x)[0], model(changed)[0]
    assert torch.equal(before[:, :25], after[:, :25])
    assert not torch.allclose(before[:, 25], after[:, 25])
    mixer = model.transformer.blocks[0].self_attn
    for kwargs in ({"causal": False}, {"causal": True, "need_weights": True}, {"causal": True, "cache": object()}):
        with pytest.raises(ValueError, match="reads only earlier positions"):
            mixer(torch.randn(1, 3, 64, dtype=torch.float64), **kwargs)
    with pytest.raises(ValueError, match="unknown mixer"):
        RecurrentMixer("gru", 8)


# ----------------------------------------------------------------------------- truncated BPTT

def full_bptt_gradient(model, x, y):
    logits, _ = model(x)
    loss = F.cross_entropy(logits.flatten(0, 1), y.flatten())
    return torch.cat([g.flatten() for g in torch.autograd.grad(loss, list(model.parameters()))])


@pytest.mark.parametrize("kind", ["rnn", "gru", "lstm"])
def test_truncation_at_least_the_sequence_is_full_bptt(kind):
    model = small(kind).train()
    x, y = tokens(3, 24), tokens(3, 24, seed=2)
    full = full_bptt_gradient(model, x, y)
    for k in (24, 100):
        assert torch.allclose(lm.bptt_gradient(model, x, y, k), full, atol=1e-12)
    short = lm.bptt_gradient(model, x, y, 4)
    assert not torch.allclose(short, full, atol=1e-6), "a shorter truncation gives another gradient"


def test_truncated_gradient_treats_the_carried_state_as_a_constant():
    """Chunk 2's part of the gradient is the gradient of its loss from the state chunk 1 left,
    taken as fixed input: nothing flows back into chunk 1."""
    model = small("lstm").train()
    x, y = tokens(2, 12), tokens(2, 12, seed=2)
    params = list(model.parameters())
    _, state = model(x[:, :6])
    state = tuple(s.detach() for s in state)
    parts = []
    for xs, ys, st in ((x[:, :6], y[:, :6], None), (x[:, 6:], y[:, 6:], state)):
        logits, _ = model(xs, st)
        loss = F.cross_entropy(logits.flatten(0, 1), ys.flatten(), reduction="sum") / y.numel()
        parts.append(torch.cat([g.flatten() for g in torch.autograd.grad(loss, params)]))
    assert torch.allclose(lm.bptt_gradient(model, x, y, 6), parts[0] + parts[1], atol=1e-12)


def test_train_chunk_carries_the_state_and_cuts_the_graph():
    torch.manual_seed(0)
    model = CharRNN("lstm", V, 8, 16)
    reference = CharRNN("lstm", V, 8, 16)
    reference.load_state_dict(model.state_dict())
    opt, ref_opt = torch.optim.Adam(model.parameters(), 1e-2), torch.optim.Adam(reference.parameters(), 1e-2)
    x, y = tokens(2, 20), tokens(2, 20, seed=2)
    state = None
    for start in (0, 10):
        loss, state = lm.train_chunk(model, opt, x[:, start:start + 10], y[:, start:start + 10], state, math.inf)
        assert all(not s.requires_grad for s in state), "the state handed on is detached"
    # by hand: the second chunk starts from the state the first one ended in (after its update)
    ref_state = None
    for start in (0, 10):
        logits, ref_state = reference(x[:, start:start + 10], ref_state)
        ref_loss = F.cross_entropy(logits.flatten(0, 1), y[:, start:start + 10].flatten())
        ref_opt.zero_grad()
        ref_loss.backward()
        ref_opt.step()
        ref_state = detach_state(ref_state)
    assert loss == pytest.approx(ref_loss.item(), abs=1e-6)
    for p, q in zip(model.parameters(), reference.parameters()):
        assert torch.allclose(p, q, atol=1e-6)


def test_a_short_training_run_learns_and_keeps_its_shape(monkeypatch):
    p = dataclasses.replace(lm.PROTOCOL, steps=6, eval_every=3, eval_windows=8, eval_count=50)
    shapes = []
    step = lm.train_chunk
    monkeypatch.setattr(lm, "train_chunk", lambda m, o, x, y, s, c: (shapes.append(tuple(x.shape)), step(m, o, x, y, s, c))[1])
    run = lm.train("lstm", p)
    assert shapes == [(p.batch, p.chunk)] * 6
    assert len(run.losses) == 6 and run.val_steps == [3, 6] and run.position.shape == (p.chunk,)
    assert run.losses[-1] < run.losses[0]


def test_learning_rate_warms_up_then_falls_to_a_tenth():
    p = lm.PROTOCOL
    rates = [lm.learning_rate(s) for s in range(p.steps)]
    assert rates[0] == pytest.approx(p.lr / p.warmup) and rates[p.warmup - 1] == pytest.approx(p.lr)
    assert max(rates) == pytest.approx(p.lr) and rates[-1] == pytest.approx(p.lr / 10, rel=1e-3)
    assert all(a >= b for a, b in zip(rates[p.warmup:], rates[p.warmup + 1:]))


# ----------------------------------------------------------------------------- evaluation

def test_position_loss_is_cross_entropy_by_position():
    model = small("lstm")
    x, y = tokens(10, 7), tokens(10, 7, seed=3)
    by_position = lm.position_loss(model, x, y, batch=3)
    logits, _ = model(x)
    want = F.cross_entropy(logits.transpose(1, 2), y, reduction="none").mean(0)
    assert torch.allclose(by_position.double(), want, atol=1e-6)


def test_ngram_baselines():
    ids = torch.tensor([0, 1] * 500)
    assert lm.ngram_bits(ids, ids, 2, 1, alpha=0) == pytest.approx(1.0), "two equally common characters: 1 bit"
    assert lm.ngram_bits(ids, ids, 2, 2, alpha=1e-9) == pytest.approx(0.0, abs=1e-6), "each follows the other"
    g = torch.Generator().manual_seed(0)
    train, val = torch.randint(0, 4, (20_000,), generator=g), torch.randint(0, 4, (5_000,), generator=g)
    assert lm.ngram_bits(train, val, 4, 1) == pytest.approx(2.0, abs=0.01), "uniform over 4: 2 bits"


# ----------------------------------------------------------------------------- sampling

def test_next_token_at_temperature_one_is_torch_multinomial_of_the_softmax():
    logits = torch.randn(5, V, generator=torch.Generator().manual_seed(0))
    ours = next_token(logits, 1.0, None, torch.Generator().manual_seed(7))
    want = torch.multinomial(logits.softmax(-1), 1, generator=torch.Generator().manual_seed(7))
    assert torch.equal(ours, want)


def test_temperature_towards_zero_is_greedy_decoding():
    logits = torch.randn(200, V, generator=torch.Generator().manual_seed(0)) * 3
    greedy = next_token(logits, 0.0)
    assert torch.equal(greedy, logits.argmax(-1, keepdim=True))
    g = torch.Generator().manual_seed(1)
    assert torch.equal(next_token(logits, 1e-3, generator=g), greedy)
    assert not torch.equal(next_token(logits, 1.0, generator=g), greedy), "at temperature 1 it does draw"
    for kind in ("lstm", "gpt"):
        model, prompt = small(kind), tokens(2, 5)
        cold = generate(model, prompt, 20, temperature=1e-4, generator=torch.Generator().manual_seed(3))
        assert torch.equal(cold, generate(model, prompt, 20, temperature=0))


def test_top_k_draws_only_among_the_k_most_likely():
    logits = torch.randn(1, V, generator=torch.Generator().manual_seed(0)).expand(4000, V)
    top3 = set(logits[0].topk(3).indices.tolist())
    drawn = next_token(logits, 1.0, 3, torch.Generator().manual_seed(2))
    assert set(drawn.flatten().tolist()) == top3, "all three drawn, nothing else"
    assert torch.equal(next_token(logits, 1.0, 1, torch.Generator()), logits.argmax(-1, keepdim=True))
    # and in proportion to their renormalised probabilities
    probs = logits[0].softmax(-1)[sorted(top3)]
    share = torch.stack([(drawn == i).float().mean() for i in sorted(top3)])
    assert torch.allclose(share, probs / probs.sum(), atol=0.03)


def test_higher_temperature_spreads_the_draws():
    logits = torch.randn(1, V, generator=torch.Generator().manual_seed(0)).expand(4000, V) * 2
    distinct = [len(set(next_token(logits, t, None, torch.Generator().manual_seed(5)).flatten().tolist()))
                for t in (0.25, 1.0, 4.0)]
    assert distinct[0] < distinct[1] <= distinct[2]


@pytest.mark.parametrize("kind", ["rnn", "lstm", "gpt"])
def test_generation_with_the_cache_equals_rereading_the_text(kind):
    model, prompt = small(kind), tokens(3, 6)
    kwargs = dict(temperature=1.0, top_k=5)
    cached = generate(model, prompt, 30, generator=torch.Generator().manual_seed(4), **kwargs)
    reread = generate(model, prompt, 30, generator=torch.Generator().manual_seed(4), use_cache=False, **kwargs)
    assert cached.shape == (3, 36) and torch.equal(cached[:, :6], prompt)
    assert torch.equal(cached, reread)


def test_the_cache_reads_each_character_once():
    model, prompt = small("gpt"), tokens(1, 4)
    seen = []
    stream = model.stream
    model.stream = lambda t, s=None: (seen.append(t.shape[1]), stream(t, s))[1]
    generate(model, prompt, 10)
    assert seen == [4] + [1] * 9
    seen.clear()
    generate(model, prompt, 3, use_cache=False)
    assert seen == [4, 5, 6]
