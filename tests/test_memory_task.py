import dataclasses

import pytest
import torch
from torch.nn.functional import cross_entropy

from lessonlib.models.batched_rnn import BatchedRNNClassifier
from lessonlib.experiments.memory_task import (
    CLUES,
    PROTOCOL,
    MemoryModel,
    build,
    format_table,
    make_batch,
    sweep,
    train,
    train_seeds,
    validation_set,
)


def test_batch_label_is_the_first_token_and_the_rest_is_noise(device):
    tokens, labels = make_batch(512, 30, torch.Generator().manual_seed(0), device)
    assert tokens.shape == (512, 30) and labels.shape == (512,)
    assert tokens.device.type == labels.device.type == device.type
    assert tokens.dtype == labels.dtype == torch.long
    assert torch.equal(tokens[:, 0], labels)
    assert set(labels.tolist()) == {0, 1}  # both classes, and nothing else
    noise = tokens[:, 1:]
    assert noise.min() >= CLUES and noise.max() < PROTOCOL.vocab  # never a clue token
    assert set(noise.unique().tolist()) == set(range(CLUES, PROTOCOL.vocab))  # every noise token is used


def test_batches_are_deterministic_and_device_independent(device):
    a = make_batch(64, 10, torch.Generator().manual_seed(7), device)
    b = make_batch(64, 10, torch.Generator().manual_seed(7), device)
    c = make_batch(64, 10, torch.Generator().manual_seed(7), "cpu")
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert torch.equal(a[0].cpu(), c[0]) and torch.equal(a[1].cpu(), c[1])
    assert not torch.equal(a[0], make_batch(64, 10, torch.Generator().manual_seed(8), device)[0])


def test_validation_set_is_fixed_per_length():
    tokens, labels = validation_set(30)
    assert tokens.shape == (PROTOCOL.val_size, 30) and torch.equal(tokens[:, 0], labels)
    assert torch.equal(tokens, validation_set(30)[0])
    assert not torch.equal(tokens[:, :10], validation_set(10)[0])


def test_model_shapes_and_open_gate(device):
    tokens, _ = make_batch(8, 12, torch.Generator().manual_seed(0), device)
    for name in ("rnn", "lstm", "lstm_open"):
        assert build(name, 0, device=device)(tokens).shape == (8, CLUES)
    H = PROTOCOL.hidden
    lstm, opened = build("lstm", 0).rnn, build("lstm_open", 0).rnn
    for name in ("bias_ih_l0", "bias_hh_l0"):
        assert (getattr(opened, name)[H : 2 * H] == 1.5).all()
        assert torch.equal(getattr(opened, name)[:H], getattr(lstm, name)[:H])  # only the forget slice moved
    with pytest.raises(ValueError):
        MemoryModel("gru")


def test_batched_rnn_matches_separate_nn_rnns(device):
    seeds = (0, 1, 2)
    models = [build("rnn", s, device=device) for s in seeds]
    batched = BatchedRNNClassifier(models)
    batches = [make_batch(16, 25, torch.Generator().manual_seed(s), device) for s in seeds]
    tokens, labels = torch.stack([t for t, _ in batches]), torch.stack([y for _, y in batches])
    logits = batched(tokens)  # (M, B, 2)
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):  # full fp32 for nn.RNN on a GPU
        separate = [model(t) for model, t in zip(models, tokens)]
    for m in range(len(models)):
        torch.testing.assert_close(logits[m], separate[m], rtol=1e-4, atol=1e-5)
    # gradients, and the clipping of each model's gradient on its own
    sum(cross_entropy(out, y) for out, y in zip(separate, labels)).backward()
    cross_entropy(logits.transpose(1, 2), labels, reduction="none").mean(1).sum().backward()
    norms = batched.clip_grad_norm_(0.1)
    for m, model in enumerate(models):
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
        torch.testing.assert_close(norms[m], norm, rtol=1e-4, atol=1e-6)
        close = dict(rtol=1e-3, atol=1e-6)
        torch.testing.assert_close(batched.weight_hh.grad[m], model.rnn.weight_hh_l0.grad.T, **close)
        torch.testing.assert_close(batched.embed.grad[m], model.embed.weight.grad, **close)


def test_a_seed_trains_the_same_alone_or_with_others(device):
    if device.type != "cpu":
        pytest.skip("bit-identical results are a CPU promise")
    short = dataclasses.replace(PROTOCOL, steps=30)
    for name in ("rnn", "lstm"):
        together = train_seeds(name, 12, (0, 1, 2), short, device)
        assert together == [train(name, 12, s, short, device) for s in (0, 1, 2)]


def test_training_is_deterministic(device):
    if device.type != "cpu":
        pytest.skip("bit-identical results are a CPU promise")
    short = dataclasses.replace(PROTOCOL, steps=40)
    first, second = train("lstm", 20, 3, short, device), train("lstm", 20, 3, short, device)
    assert first == second  # same seed, same device: the same run to the last bit of accuracy
    assert first.steps == 40


def test_open_gate_lstm_solves_short_sequences_quickly(device):
    run = train("lstm_open", 10, 0, dataclasses.replace(PROTOCOL, steps=200), device)
    assert run.accuracy >= PROTOCOL.solved
    assert run.steps < 200  # stopped early, by the solved rule


def test_at_length_30_only_the_open_gate_lstm_remembers(device):
    # the lesson's contrast under the full protocol: same length, same budget, different forget gate
    assert train("lstm", 30, 0, PROTOCOL, device).accuracy < 0.6
    assert train("lstm_open", 30, 0, PROTOCOL, device).accuracy >= PROTOCOL.solved


def test_sweep_matches_train_and_does_not_depend_on_workers(device):
    short = dataclasses.replace(PROTOCOL, steps=30)

    def run(workers: int) -> dict:
        return sweep(("rnn", "lstm_open"), (10,), (0, 1), short, device, progress=False, workers=workers)

    results = run(1)
    assert list(results) == [("rnn", 10, 0), ("rnn", 10, 1), ("lstm_open", 10, 0), ("lstm_open", 10, 1)]
    assert results["lstm_open", 10, 1] == train("lstm_open", 10, 1, short, device)
    if device.type == "cpu":  # worker processes, one thread each: the same numbers
        assert run(2) == results
    table = format_table(results)
    assert len(table.splitlines()) == 3 and "lstm_open" in table
