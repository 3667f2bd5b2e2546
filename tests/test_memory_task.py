import dataclasses
import importlib.util
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch.nn.functional import cross_entropy

from lessonlib.experiments import memory_task
from lessonlib.experiments.memory_task import (
    CLUES,
    KNOWN,
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
from lessonlib.models.batched_rnn import BatchedRNNClassifier


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
    for name in KNOWN:
        assert build(name, 0, device=device)(tokens).shape == (8, CLUES)
    H = PROTOCOL.hidden
    lstm, opened = build("lstm", 0).rnn, build("lstm_open", 0).rnn
    for name in ("bias_ih_l0", "bias_hh_l0"):
        assert (getattr(opened, name)[H : 2 * H] == 1.5).all()
        assert torch.equal(getattr(opened, name)[:H], getattr(lstm, name)[:H])  # only the forget slice moved
    with pytest.raises(ValueError):
        MemoryModel("no such model")


def test_every_model_classifies_its_layer_s_output_at_the_last_position(device):
    """The transformer, linear attention and minGRU compute the last position alone (`last=1`): the
    logits are still those of the layer's whole output, read at its end."""
    tokens, _ = make_batch(8, 40, torch.Generator().manual_seed(0), device)
    for name in KNOWN:
        model = build(name, 0, device=device)
        whole = model.rnn(model.embed(tokens))[0]  # (B, L, H)
        torch.testing.assert_close(model(tokens), model.head(whole[:, -1]), rtol=1e-4, atol=1e-6, msg=name)


# Each batched parameter, and model m's gradient for it in nn's layout (x @ W: W transposed).
NN_GRADS = {
    "embed": lambda m: m.embed.weight.grad,
    "weight_ih": lambda m: m.rnn.weight_ih_l0.grad.T,
    "weight_hh": lambda m: m.rnn.weight_hh_l0.grad.T,
    "bias_ih": lambda m: m.rnn.bias_ih_l0.grad,
    "bias_hh": lambda m: m.rnn.bias_hh_l0.grad,
    "head_weight": lambda m: m.head.weight.grad.T,
    "head_bias": lambda m: m.head.bias.grad,
}


def assert_grads_match(batched: BatchedRNNClassifier, models: list[MemoryModel]) -> None:
    assert set(NN_GRADS) == {name for name, _ in batched.named_parameters()}  # every parameter
    for name, grad_of in NN_GRADS.items():
        for m, model in enumerate(models):
            torch.testing.assert_close(getattr(batched, name).grad[m], grad_of(model), rtol=1e-3, atol=1e-6,
                                       msg=lambda text: f"gradient of {name}, model {m}: {text}")


@pytest.mark.parametrize("name", ["rnn", "gru_open"])
def test_batched_loop_matches_separate_nn_layers(device, name):
    seeds = (0, 1, 2)
    models = [build(name, s, device=device) for s in seeds]
    batched = BatchedRNNClassifier(models)
    batches = [make_batch(16, 25, torch.Generator().manual_seed(s), device) for s in seeds]
    tokens, labels = torch.stack([t for t, _ in batches]), torch.stack([y for _, y in batches])
    logits = batched(tokens)  # (M, B, 2)
    cross_entropy(logits.transpose(1, 2), labels, reduction="none").mean(1).sum().backward()
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):  # full fp32 for nn.RNN/GRU on a GPU
        separate = [model(t) for model, t in zip(models, tokens)]
        sum(cross_entropy(out, y) for out, y in zip(separate, labels)).backward()
    for m in range(len(models)):
        torch.testing.assert_close(logits[m], separate[m], rtol=1e-4, atol=1e-5)
    assert_grads_match(batched, models)
    # clipping: each model's gradient on its own, as nn.utils.clip_grad_norm_ does for one model
    norms = batched.clip_grad_norm_(0.1)
    for m, model in enumerate(models):
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
        torch.testing.assert_close(norms[m], norm, rtol=1e-4, atol=1e-6)
    assert_grads_match(batched, models)


def test_the_batched_loop_takes_rnns_or_grus_alone():
    with pytest.raises(TypeError, match="all an nn.GRU"):
        BatchedRNNClassifier([build("rnn", 0), build("gru", 1)])
    with pytest.raises(TypeError):
        BatchedRNNClassifier([build("lstm", 0)])


def _bench_baseline():
    """The benchmark's plain training loop: one nn.RNN / nn.LSTM model, torch's own layers."""
    path = Path(__file__).resolve().parents[1] / "scripts" / "bench_memory_task.py"
    spec = importlib.util.spec_from_file_location("bench_memory_task", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.train_baseline


@pytest.mark.parametrize("name", ["rnn", "gru"])
def test_batched_training_equals_a_plain_nn_layer_s_training(name):
    # Stopped mid-learning (no early stop), where any difference in the trajectory shows in the accuracy.
    # On a CPU the two loops agree to the last of the 1,000 validation answers; 3 are allowed.
    mid = dataclasses.replace(PROTOCOL, steps=100, solved=1.01)
    seeds = (0, 1, 2)
    ours = train_seeds(name, 10, seeds, mid)
    plain = [_bench_baseline()(name, 10, s, mid) for s in seeds]
    assert [run.steps for run in ours] == [run.steps for run in plain] == [100] * 3
    for seed, a, b in zip(seeds, ours, plain):
        assert abs(a.accuracy - b.accuracy) <= 0.003, (seed, a, b)
    assert max(run.accuracy for run in plain) > 0.8  # it was learning: the comparison can see a difference


def test_a_seed_trains_the_same_alone_or_with_others():
    # bit-identical on a CPU, RNNs and GRUs (one batched loop) and LSTMs (nn.LSTM side by side) alike
    short = dataclasses.replace(PROTOCOL, steps=30)
    for name in ("rnn", "gru", "lstm"):
        together = train_seeds(name, 12, (0, 1, 2), short)
        assert together == [train(name, 12, s, short) for s in (0, 1, 2)]


def test_together_and_alone_agree_on_any_device(device):
    # on a GPU, kernels differ with the number of models: close, not bit-identical
    short = dataclasses.replace(PROTOCOL, steps=30)
    for name in ("rnn", "lstm"):
        together = train_seeds(name, 12, (0, 1), short, device)
        alone = [train(name, 12, s, short, device) for s in (0, 1)]
        for a, b in zip(together, alone):
            assert a.steps == b.steps and abs(a.accuracy - b.accuracy) <= 0.005, (name, a, b)


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
    if device.type == "cpu":
        # worker processes, one thread each, with none of this process's state or addresses (nor its
        # hash seed, unless PYTHONHASHSEED fixes one): the same numbers to the last bit, so the seed
        # alone fixes a run
        assert run(2) == results
    table = format_table(results)
    assert len(table.splitlines()) == 3 and "lstm_open" in table


def test_a_sweep_with_lengths_per_model_gives_each_model_its_own(device):
    short = dataclasses.replace(PROTOCOL, steps=30)
    results = sweep(("rnn", "lstm_open"), {"rnn": (10,), "lstm_open": (12,)}, (0,), short, device, progress=False)
    assert list(results) == [("rnn", 10, 0), ("lstm_open", 12, 0)]
    assert results["lstm_open", 12, 0] == train("lstm_open", 12, 0, short, device)
    with pytest.raises(ValueError, match="must name exactly the models"):
        sweep(("rnn", "lstm_open"), {"rnn": (10,)}, (0,), short, device, progress=False)


def test_recurrent_gradient_terms_add_up_to_the_gradient_of_w_hh():
    model = memory_task.build("rnn", 0)
    tokens, labels = memory_task.make_batch(16, 12, torch.Generator().manual_seed(0), "cpu")
    terms = memory_task.recurrent_gradient_terms(model, tokens, labels)
    assert terms.shape == (12, 32, 32)
    cross_entropy(model(tokens), labels).backward()  # through nn.RNN's own kernel
    assert torch.allclose(terms.sum(0), model.rnn.weight_hh_l0.grad, atol=1e-6)
    assert terms[0].abs().max() < terms[-1].abs().max(), "the first step's term is the smaller"
    with pytest.raises(ValueError, match="plain RNN"):
        memory_task.recurrent_gradient_terms(memory_task.build("lstm", 0), tokens, labels)


def test_the_table_lines_up_its_columns_for_any_model_name():
    run = SimpleNamespace(accuracy=0.5, steps=600)
    table = format_table({("rnn", 10, 0): run, ("min_gru_closed", 100, 0): run}).splitlines()
    ends = {table[0].index("seed 0") + len("seed 0"), *(line.index("0.500") + len("0.500") for line in table[1:])}
    assert len(ends) == 1, table  # each seed's accuracies end where its heading does
