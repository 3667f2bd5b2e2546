"""sequence_cost: the counts against closed forms, the saved-bytes probe, the KV-cache count,
and the memory task's transformer (its place in the protocol)."""
import torch
from torch.nn import functional as F

from lessonlib.experiments import memory_task, sequence_cost
from lessonlib.models.transformer import TokenModel, Transformer

H, E = memory_task.PROTOCOL.hidden, memory_task.PROTOCOL.embedding


def test_counts_follow_the_closed_forms():
    lengths = (4, 8, 16)
    counts = sequence_cost.count(lengths)
    lstm, tf = counts["lstm"], counts["transformer"]
    # LSTM forward per step: two (B, .) x (., 4H) products, 2 flops per multiply-add; the head once
    forward_step = 2 * (E * 4 * H + H * 4 * H)
    head = 2 * H * memory_task.CLUES
    # backward: the gradient with respect to both factors of every product, twice the forward,
    # except for the first step's zero initial state, which needs none
    assert list(lstm["flops"]) == [3 * (forward_step * n + head) - 2 * H * 4 * H for n in lengths]
    assert list(lstm["products"]) == [2 * n + 1 for n in lengths]
    assert list(tf["attention_flops"]) == [4 * n * n * H for n in lengths]
    assert len(set(tf["products"])) == 1
    assert (tf["saved"] > tf["saved_fused"]).all(), "written-out attention keeps its weights"


def test_saved_bytes_counts_each_storage_once():
    w = torch.randn(100, 100, requires_grad=True)  # 40,000 bytes
    x = torch.randn(3, 100)  # 1,200 bytes, a leaf without grad: saved for w's gradient

    def twice():  # two views of x, two tensors sharing one storage, saved by two products
        return (x[:2] @ w).sum() + (x[1:] @ w).sum()

    saved, out = sequence_cost.saved_bytes(twice)
    assert saved == x.untyped_storage().nbytes()  # w needs no saving (x has no grad), x's storage once
    assert out.requires_grad


def test_quadratic_memory_shows_in_the_written_out_path_only():
    counts = sequence_cost.count((100, 400))  # four times the length
    growth = {key: counts["transformer"][key][1] / counts["transformer"][key][0] for key in ("saved", "saved_fused")}
    assert growth["saved"] > 6, "the (L, L) weights of every head: quadratic"
    assert growth["saved_fused"] < 4, "linear (a constant part makes it less than 4)"
    assert counts["lstm"]["saved"][1] / counts["lstm"]["saved"][0] < 4


def test_token_flops_with_and_without_cache():
    model = TokenModel(11, 32, 2, layers=2, positions="sinusoidal").eval()
    flops = sequence_cost.token_flops(model, (5, 9, 17))
    cached = flops["cache"]
    assert list(cached[1:] - cached[:-1]) == [2 * 4 * 32 * 4, 2 * 4 * 32 * 8], "4d per cached token, per layer"
    assert list(flops["no_cache"]) == [(n + 1) * c for n, c in zip((5, 9, 17), cached)]


def test_time_step_returns_one_median_per_length():
    timed = sequence_cost.time_step((5, 10), reps=1, warmup=0)
    assert list(timed["length"]) == [5, 10]
    for name in sequence_cost.MODELS:
        assert timed[name].shape == (2,) and (timed[name] > 0).all()


def test_memory_task_transformer_fills_the_recurrent_slot(device):
    model = memory_task.build("transformer", 0, device=device)
    assert isinstance(model.rnn, Transformer) and model.rnn.causal
    assert model.rnn.project.in_features == E and model.rnn.norm.normalized_shape == (H,)
    tokens, labels = memory_task.make_batch(8, 40, torch.Generator().manual_seed(0), device)
    logits = model(tokens)
    assert logits.shape == (8, memory_task.CLUES)
    # it computes only the last position's query; every position computed gives the same logits
    for written_out in (False, True):
        torch.testing.assert_close(sequence_cost.every_position(model, tokens, written_out), logits)
    # causal: the logits read the last position, which sees everything; changing a middle token moves them
    changed = tokens.clone()
    changed[:, 20] = (changed[:, 20] - 2 + 1) % (memory_task.PROTOCOL.vocab - 2) + 2
    assert not torch.allclose(model(changed), logits)
    F.cross_entropy(logits, labels).backward()
    assert all(p.grad is not None for p in model.parameters())


def test_memory_task_transformer_learns_a_short_length():
    run = memory_task.train("transformer", 10, 0)
    assert run.accuracy >= memory_task.PROTOCOL.solved and run.steps < memory_task.PROTOCOL.steps
