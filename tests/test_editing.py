"""Lesson 7's tasks and protocol (lessonlib.experiments.editing): the answers the tasks ask for, the
model wrapper with each mixer, the stale-value rate, and seeded training."""
import dataclasses
import math

import pytest
import torch

from lessonlib.experiments.editing import (
    IGNORE,
    MIXERS,
    OVERWRITE,
    RECALL,
    RESET,
    EditingModel,
    build,
    evaluate,
    gate_at_separator,
    make_batch,
    overwrite_batch,
    recall_batch,
    reset_batch,
    score,
    train,
    train_all,
)

P = OVERWRITE
SEP = P.vocab - 1


def bindings(tokens):
    """One sequence's context read as a list of (key, value class) in order."""
    return [(int(k), int(v) - P.keys) for k, v in zip(tokens[0::2], tokens[1::2])]


def test_overwrite_answers_are_the_new_values_and_old_is_the_first(device):
    n = 5
    batch = overwrite_batch(32, n, torch.Generator().manual_seed(0), device)
    assert batch.tokens.shape == batch.targets.shape == batch.old.shape == (32, 5 * n)
    assert batch.tokens.device.type == device.type
    for tokens, targets, old in zip(*(x.cpu() for x in batch)):
        first, second = bindings(tokens[: 2 * n]), bindings(tokens[2 * n : 4 * n])
        assert sorted(k for k, _ in first) == sorted(k for k, _ in second)  # the same n keys, rebound
        assert len({k for k, _ in first}) == n and all(k < P.keys for k, _ in first)
        assert all(0 <= v < P.values for _, v in first + second)
        assert (targets[: 4 * n] == IGNORE).all() and (old[: 4 * n] == IGNORE).all()
        queries = tokens[4 * n :].tolist()
        assert sorted(queries) == sorted(k for k, _ in first)  # every key asked once
        new_of, old_of = dict(second), dict(first)
        assert targets[4 * n :].tolist() == [new_of[q] for q in queries]
        assert old[4 * n :].tolist() == [old_of[q] for q in queries]
        assert all(new_of[k] != old_of[k] for k in new_of)  # an overwrite always changes the value
    firsts = batch.tokens[:, 0:2 * n:2].cpu()
    seconds = batch.tokens[:, 2 * n:4 * n:2].cpu()
    assert not torch.equal(firsts, seconds)  # the new block comes in a new order


def test_recall_answers_each_key_with_its_value(device):
    n = 7
    batch = recall_batch(16, n, torch.Generator().manual_seed(1), device, RECALL)
    assert batch.tokens.shape == (16, 3 * n)
    assert (batch.old == IGNORE).all()  # nothing is stale in plain recall
    for tokens, targets in zip(batch.tokens.cpu(), batch.targets.cpu()):
        value_of = dict(bindings(tokens[: 2 * n]))
        queries = tokens[2 * n :].tolist()
        assert sorted(queries) == sorted(value_of) and len(value_of) == n
        assert targets[2 * n :].tolist() == [value_of[q] for q in queries]
        assert (targets[: 2 * n] == IGNORE).all()


def test_reset_asks_the_new_block_after_one_separator(device):
    n = 6
    batch = reset_batch(64, n, torch.Generator().manual_seed(2), device, RESET)
    assert batch.tokens.shape == (64, 5 * n + 1)
    tokens, targets, old = (x.cpu() for x in batch)
    assert (tokens[:, 2 * n] == SEP).all() and (tokens == SEP).sum() == 64  # one separator, between the blocks
    overlaps = 0
    for row in range(64):
        first = dict(bindings(tokens[row, : 2 * n]))
        second = dict(bindings(tokens[row, 2 * n + 1 : 4 * n + 1]))
        queries = tokens[row, 4 * n + 1 :].tolist()
        assert sorted(queries) == sorted(second)
        assert targets[row, 4 * n + 1 :].tolist() == [second[q] for q in queries]
        for q, o in zip(queries, old[row, 4 * n + 1 :].tolist()):
            stale = first.get(q)
            assert o == (stale if stale is not None and stale != second[q] else IGNORE)
            overlaps += o != IGNORE
    assert overlaps > 0  # old keys do come back with new values


def test_batches_depend_only_on_the_generator(device):
    a = make_batch(P, 8, 4, torch.Generator().manual_seed(3), device, step=1)
    b = make_batch(P, 8, 4, torch.Generator().manual_seed(3), "cpu", step=1)
    assert all(torch.equal(x.cpu(), y) for x, y in zip(a, b))
    plain = make_batch(P, 8, 4, torch.Generator().manual_seed(3), "cpu", step=2)  # every other batch: recall
    assert plain.tokens.shape == (8, 12) and (plain.old == IGNORE).all()


def test_score_counts_stale_answers():
    batch = overwrite_batch(4, 3, torch.Generator().manual_seed(4))
    for answer, accuracy, stale in ((batch.targets, 1.0, 0.0), (batch.old, 0.0, 1.0)):
        logits = torch.nn.functional.one_hot(answer.clamp(min=0), P.values).float()
        assert score(logits, batch) == (accuracy, stale)
    plain = recall_batch(4, 3, torch.Generator().manual_seed(4))
    assert math.isnan(score(torch.zeros(4, 9, P.values), plain).stale)  # no old values: no rate


def test_an_untrained_model_has_a_stale_rate(device):
    small = dataclasses.replace(P, eval_size=64)
    s = evaluate(build("linear", 0, small, device), small, 4, device)
    assert 0 <= s.stale <= 1 and 0 <= s.accuracy <= 1
    assert s.accuracy + s.stale <= 1  # the new and old values differ, so no answer is both


@pytest.mark.parametrize("mixer", MIXERS)
def test_each_mixer_is_causal_and_trains(mixer, device):
    model = build(mixer, 0, P, device)
    tokens = overwrite_batch(3, 4, torch.Generator().manual_seed(5), device).tokens  # (3, 20)
    logits = model(tokens)
    assert logits.shape == (3, 20, P.values)
    later = tokens.clone()
    later[:, 10:] = (later[:, 10:] + 1) % P.vocab
    assert torch.equal(model(later)[:, :10], logits[:, :10])  # position t reads positions <= t only
    assert not torch.allclose(model(later)[:, 10:], logits[:, 10:])
    logits.sum().backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)


def test_an_unknown_mixer_or_task_is_refused():
    with pytest.raises(ValueError, match="unknown mixer"):
        EditingModel("lstm")
    with pytest.raises(ValueError, match="unknown task"):
        make_batch(dataclasses.replace(P, task="copy"), 2, 2, torch.Generator())


TINY = dataclasses.replace(P, steps=6, pairs=(2, 4), eval_pairs=(3,), eval_size=32)


def test_training_is_seeded():
    a, b, c = train(TINY, "delta", 0), train(TINY, "delta", 0), train(TINY, "delta", 1)
    assert a.curve == b.curve and a.accuracy == b.accuracy and a.stale == b.stale
    assert a.curve != c.curve  # another seed is another run
    assert a.curve_steps == [1, 3, 5]  # overwrite's own batches only
    assert set(a.accuracy) == set(a.stale) == {3} and not math.isnan(a.stale[3])


def test_a_run_s_history_is_every_shorter_run():
    long = train(dataclasses.replace(TINY, eval_every=2), "linear", 0)
    short = train(dataclasses.replace(TINY, steps=4), "linear", 0)
    assert sorted(long.history) == [2, 4, 6]
    assert long.history[4] == {3: (short.accuracy[3], short.stale[3])}
    assert long.history[6] == {3: (long.accuracy[3], long.stale[3])}


def test_train_all_returns_train_s_results():
    runs = train_all(TINY, ("softmax",), (0, 1), workers=1)
    assert list(runs) == [("softmax", 0), ("softmax", 1)]
    assert [r.seed for r in runs.values()] == [0, 1]
    alone = train(TINY, "softmax", 1)
    assert runs["softmax", 1].curve == alone.curve and runs["softmax", 1].history == alone.history


def test_the_gate_is_read_at_the_separator():
    model = build("gated", 0, RESET)
    small = dataclasses.replace(RESET, eval_size=16)
    with torch.no_grad():
        model.mixer.a_proj.weight.zero_()
        model.mixer.a_proj.bias.fill_(3.0)
        model.mixer.a_proj.weight[:, :] = model.embed.weight[SEP] * -10.0 / model.embed.weight[SEP].norm() ** 2
    sep, rest = gate_at_separator(model, small)
    assert len(sep) == len(rest) == RESET.heads
    for s, r in zip(sep, rest):
        assert s == pytest.approx(torch.sigmoid(torch.tensor(-7.0)).item(), rel=1e-4)  # 3 - 10 at the separator
        assert s < 0.01 < r < 1
    assert gate_at_separator(build("delta", 0, RESET), small) == ([], [])
