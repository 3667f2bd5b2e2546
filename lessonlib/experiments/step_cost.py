"""What one new token costs: an RNN step versus an attention step over the prefix.

An RNN carries the past in a fixed-size state, so producing token n costs the same at n = 10
as at n = 100 000. Attention reads every earlier position's key and value, so token n costs
about 2 n d multiply-adds (scores, then the weighted sum): per token it grows with the
prefix, and a whole sequence costs O(n^2). (Both also pay per-token projections, constant in
n; those are left out of the attention count here, which is only the part that grows.)

By multiply-adds a GRU step is 3 RNN steps and an LSTM step 4 (one matrix product per gate).
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

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
