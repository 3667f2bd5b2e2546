"""What a training step costs as the sequence grows: the memory task's LSTM against its transformer.

Both models compute the output at every position, as a model that predicts each next token
must: the memory task itself classifies only the last position, and its transformer then
computes only that query (MemoryModel), which would hide the L^2 term counted here.

Measured: the wall time of one forward and backward pass on a batch of the memory task, for
each length, the two models timed in turn so that both see the same machine load.

Counted, per sequence (batch 1), on lessonlib's written-out layers, whose every matrix product
torch.utils.flop_counter.FlopCounterMode sees (torch's fused LSTM kernel hides its products):

- flops of the forward and backward pass. The LSTM does the same work at every step, so its
  count is linear in the length L; attention compares every position with every earlier one,
  so the transformer's count has an L^2 term, 4 L^2 d flops forward for Q K^T and weights @ V;
- matrix products in the forward pass: the LSTM makes two per step, and each must wait for the
  previous step's state; the transformer makes the same few, whatever L is, each over all
  positions at once. That is the difference a GPU, which runs one large product on
  thousands of cores but pays a fixed delay to start each one, turns into time;
- bytes saved for the backward pass (autograd's saved tensors, each storage counted once): the
  LSTM keeps a few vectors per step, linear in L; written-out attention keeps the (L, L) weights
  of every head, quadratic in L; torch's fused kernel keeps neither and recomputes the weights
  during the backward pass (its memory is linear again, its flops are not).

The KV cache is counted the same way: the flops to produce one new token after a prefix of n,
rerunning the prefix or reading the cached keys and values.
"""
from __future__ import annotations

import statistics
import time
from collections import Counter
from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch import Tensor, nn
from torch.nn import functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

from lessonlib.device import steady_cpu
from lessonlib.experiments import memory_task
from lessonlib.models.lstm import LSTM
from lessonlib.models.multihead import KVCache
from lessonlib.models.transformer import TokenModel

MODELS = ("lstm", "transformer")
PRODUCTS = {torch.ops.aten.mm, torch.ops.aten.addmm, torch.ops.aten.bmm}
Device = torch.device | str


def _data(length: int, batch: int, device: Device) -> tuple[Tensor, Tensor]:
    return memory_task.make_batch(batch, length, torch.Generator().manual_seed(0), device)


def time_step(lengths: Sequence[int], device: Device = "cpu", *, reps: int = 5,
              warmup: int = 2) -> dict[str, np.ndarray]:
    """Median seconds of one forward + backward pass of the memory-task models with torch's fused
    kernels (nn.LSTM, fused attention), every position computed, on the protocol's batch, per length."""
    device = torch.device(device)
    with steady_cpu(device):  # as the memory task trains; one thread also depends less on load
        return _time_step(lengths, device, reps, warmup)


def _time_step(lengths: Sequence[int], device: torch.device, reps: int, warmup: int) -> dict[str, np.ndarray]:
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    models = {name: memory_task.build(name, 0, device=device) for name in MODELS}
    seconds: dict[str, list[float]] = {name: [] for name in MODELS}
    for length in lengths:
        tokens, labels = _data(length, memory_task.PROTOCOL.batch, device)

        def step(model: memory_task.MemoryModel) -> None:
            F.cross_entropy(every_position(model, tokens), labels).backward()

        times: dict[str, list[float]] = {name: [] for name in MODELS}
        for rep in range(warmup + reps):
            for name, model in models.items():  # in turn: a change in load hits both alike
                sync()
                start = time.perf_counter()
                step(model)
                sync()  # GPU kernels run asynchronously: wait before stopping the clock
                if rep >= warmup:
                    times[name].append(time.perf_counter() - start)
        for name in MODELS:
            seconds[name].append(statistics.median(times[name]))
    return {"length": np.asarray(lengths), **{name: np.asarray(s) for name, s in seconds.items()}}


def every_position(model: memory_task.MemoryModel, tokens: Tensor, written_out: bool = False) -> Tensor:
    """The memory model's logits (B, 2), with the output of every position computed. written_out:
    through lessonlib's LSTM, or the transformer with dot_product_attention (need_weights), so
    that every product is an op a counter can see; otherwise through torch's fused kernels."""
    x = model.embed(tokens)
    if isinstance(model.rnn, nn.LSTM):
        out, _ = (LSTM.from_torch(model.rnn) if written_out else model.rnn)(x)
    else:
        out, _ = model.rnn(x, need_weights=written_out)
    return model.head(out[:, -1])


class _ProductCounter(TorchDispatchMode):
    """Counts the matrix products (mm, addmm, bmm) that run inside it."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: Counter = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        if func.overloadpacket in PRODUCTS:
            self.calls[func.overloadpacket] += 1
        return func(*args, **(kwargs or {}))


def saved_bytes(fn: Callable[[], Tensor]) -> tuple[int, Tensor]:
    """Bytes autograd saves for the backward pass while fn() runs, each storage counted once
    (a weight saved at every step is one tensor), and fn's result."""
    storages: dict[int, int] = {}

    def pack(t: Tensor) -> Tensor:
        storage = t.untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    return sum(storages.values()), out


def count(lengths: Sequence[int], device: Device = "cpu") -> dict[str, dict[str, np.ndarray]]:
    """Per sequence, for each model and length: "flops" (forward + backward), "attention_flops"
    (forward products of the (L, L) weights, transformer only), "products" (matrix products in
    the forward pass), "saved" (bytes kept for the backward pass, written-out layers) and
    "saved_fused" (the same through torch's kernels: nn.LSTM, fused attention)."""
    results: dict[str, dict[str, list[int]]] = {name: {} for name in MODELS}
    for name in MODELS:
        model = memory_task.build(name, 0, device=device)
        for length in lengths:
            tokens, labels = _data(length, 1, device)
            products = _ProductCounter()
            with FlopCounterMode(display=False) as flops:
                with products:
                    saved, logits = saved_bytes(lambda: every_position(model, tokens, written_out=True))
                forward = flops.get_flop_counts()["Global"]
                F.cross_entropy(logits, labels).backward()
            fused, _ = saved_bytes(lambda: every_position(model, tokens))
            row = {"flops": flops.get_total_flops(), "products": sum(products.calls.values()),
                   "attention_flops": forward.get(torch.ops.aten.bmm, 0), "saved": saved,
                   "saved_fused": fused}
            for key, value in row.items():
                results[name].setdefault(key, []).append(value)
    return {name: {key: np.asarray(v, dtype=np.int64) for key, v in r.items()} for name, r in results.items()}


@torch.no_grad()
def token_flops(model: TokenModel, prefixes: Sequence[int]) -> dict[str, np.ndarray]:
    """Forward flops to produce one new token after a prefix of n tokens, for each n:
    "no_cache" reruns all n + 1 positions; "cache" runs the new one against n cached keys and values."""
    device = next(model.parameters()).device
    out: dict[str, list[int]] = {"no_cache": [], "cache": []}
    for n in prefixes:
        tokens = torch.zeros(1, n + 1, dtype=torch.long, device=device)
        caches = [KVCache() for _ in model.transformer.blocks]
        model(tokens[:, :n], caches=caches)  # fill the cache with the prefix (not counted)
        for key, run in (("no_cache", lambda: model(tokens, need_weights=True)),  # written-out attention:
                         ("cache", lambda: model(tokens[:, n:], caches=caches, need_weights=True))):  # counted
            with FlopCounterMode(display=False) as flops:
                run()
            out[key].append(flops.get_total_flops())
    return {"n": np.asarray(prefixes), **{k: np.asarray(v, dtype=np.int64) for k, v in out.items()}}
