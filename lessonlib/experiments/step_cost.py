"""What one new token costs: an RNN step versus an attention step over the prefix.

An RNN carries the past in a fixed-size state, so producing token n costs the same at n = 10
as at n = 100 000. Attention reads every earlier position's key and value, so token n costs
about 2 n d multiply-adds (scores, then the weighted sum): per token it grows with the
prefix, and a whole sequence costs O(n^2). (Both also pay per-token projections, constant in
n; those are left out of the attention count here, which is only the part that grows.)

Also: forward+backward time of nn.RNN, nn.GRU and nn.LSTM at the same sizes, as ratios to
nn.RNN; by multiply-adds a GRU is 3 RNNs and an LSTM 4 (one matrix product per gate).
"""
from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence

import numpy as np
import torch
import torch.nn as nn

from lessonlib.models.attention import dot_product_attention

GATES = {"rnn": 1, "gru": 3, "lstm": 4}  # matrix products per step: tanh RNN 1, GRU 3, LSTM 4


def step_macs(prefix_lengths: Sequence[int], d: int, cell: str = "gru") -> dict[str, np.ndarray]:
    """Multiply-adds to produce one token after a prefix of n tokens, for each n.

    rnn:       GATES[cell] * d * (d + d)  (input and hidden matrices, input size d): constant
    attention: n * d for q.k_i over the prefix, n * d for sum_i w_i v_i: linear in n
    """
    n = np.asarray(prefix_lengths, dtype=np.int64)
    return {"n": n,
            "rnn": np.full_like(n, GATES[cell] * d * 2 * d),
            "attention": 2 * n * d}


def _median_seconds(fn: Callable[[], object], device: torch.device, reps: int, warmup: int) -> float:
    """Median wall time of ``fn()`` over ``reps`` runs, after ``warmup`` untimed ones."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        sync()  # GPU kernels are asynchronous: wait for them before stopping the clock
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


@torch.no_grad()
def time_step(prefix_lengths: Sequence[int], d: int = 256, device: torch.device | str = "cpu", *,
              batch: int = 1, reps: int = 30, warmup: int = 5) -> dict[str, np.ndarray]:
    """Measured seconds (median of ``reps``) to produce one token after each prefix length.

    rnn: one nn.GRUCell step, input size = hidden = d. attention: one query (the new token)
    against a cache of n keys and values, via ``dot_product_attention``. Measured side by
    side at each n, so both see the same machine load.
    """
    device = torch.device(device)
    g = torch.Generator().manual_seed(0)
    n_max = max(prefix_lengths)
    cell = nn.GRUCell(d, d).to(device)
    x = torch.randn(batch, d, generator=g).to(device)                # new token's input   (B, d)
    h = torch.randn(batch, d, generator=g).to(device)                # RNN state           (B, d)
    q = torch.randn(batch, 1, d, generator=g).to(device)             # new token's query   (B, 1, d)
    cache_k = torch.randn(batch, n_max, d, generator=g).to(device)   # keys of the prefix  (B, n_max, d)
    cache_v = torch.randn(batch, n_max, d, generator=g).to(device)   # values             (B, n_max, d)
    rnn_s, attn_s = [], []
    for n in prefix_lengths:
        k, v = cache_k[:, :n], cache_v[:, :n]
        rnn_s.append(_median_seconds(lambda: cell(x, h), device, reps, warmup))
        attn_s.append(_median_seconds(lambda: dot_product_attention(q, k, v), device, reps, warmup))
    return {"n": np.asarray(prefix_lengths), "rnn": np.asarray(rnn_s), "attention": np.asarray(attn_s)}


def rnn_family_ratios(device: torch.device | str = "cpu", *, seq_len: int = 32, batch: int = 16,
                      d: int = 128, reps: int = 10, warmup: int = 3) -> dict[str, dict[str, float]]:
    """Forward+backward time of nn.RNN, nn.GRU, nn.LSTM at the same sizes, and ratios to nn.RNN.

    Same input (batch, seq_len, d) and hidden size d for all three; each timing is the
    median of ``reps`` after ``warmup`` runs, taken in turn in one call (RNN, GRU, LSTM,
    RNN, ...) so that a change in machine load hits all three alike.
    Returns {"seconds": {name: s}, "ratio": {name: s / s_rnn}, "macs_ratio": {name: gates}}.
    """
    device = torch.device(device)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        models = {"rnn": nn.RNN(d, d, batch_first=True), "gru": nn.GRU(d, d, batch_first=True),
                  "lstm": nn.LSTM(d, d, batch_first=True)}
        x = torch.randn(batch, seq_len, d)
    models = {name: m.to(device) for name, m in models.items()}
    x = x.to(device).requires_grad_()

    def fwd_bwd(m: nn.Module) -> None:
        out, _ = m(x)
        out.sum().backward()

    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for m in models.values():
        for _ in range(warmup):
            fwd_bwd(m)
    sync()
    times: dict[str, list[float]] = {name: [] for name in models}
    for _ in range(reps):  # interleaved: one of each per round
        for name, m in models.items():
            t0 = time.perf_counter()
            fwd_bwd(m)
            sync()
            times[name].append(time.perf_counter() - t0)
    seconds = {name: statistics.median(t) for name, t in times.items()}
    return {"seconds": seconds,
            "ratio": {name: s / seconds["rnn"] for name, s in seconds.items()},
            "macs_ratio": {name: float(GATES[name]) for name in models}}
